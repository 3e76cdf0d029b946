package controller

import (
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/captf/captf/jobs"
)

// SlimJob is the cache transform of managed Jobs. It keeps what the controller reads of a Job —
// its identity, owner references, labels and annotations, when it started and how it finished —
// and drops the rest: the spec with its pod template (most of a Job's size), managed fields, and
// the status counts and conditions the run model never reads. Of the results the runner
// reports, the controller reads again only a drift check's (is there drift?), so the result
// annotation of other Jobs is dropped too. Nothing writes a cached Job back: bookkeeping reads
// the Job live before it patches it. SlimJob gives the same Job for a Job it already slimmed.
func SlimJob(in any) (any, error) {
	job, ok := in.(*batchv1.Job)
	if !ok {
		return in, nil
	}
	annotations := job.Annotations
	if _, has := annotations[jobs.AnnotationResult]; has && jobs.OpOf(job) != jobs.OpDrift {
		annotations = make(map[string]string, len(job.Annotations)-1)
		for k, v := range job.Annotations {
			if k != jobs.AnnotationResult {
				annotations[k] = v
			}
		}
	}
	slim := &batchv1.Job{
		TypeMeta: job.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name:              job.Name,
			Namespace:         job.Namespace,
			UID:               job.UID,
			ResourceVersion:   job.ResourceVersion,
			CreationTimestamp: job.CreationTimestamp,
			DeletionTimestamp: job.DeletionTimestamp,
			Labels:            job.Labels,
			Annotations:       annotations,
			OwnerReferences:   job.OwnerReferences,
		},
		Status: batchv1.JobStatus{StartTime: job.Status.StartTime, CompletionTime: job.Status.CompletionTime},
	}
	if c := jobs.FinishCondition(job); c != nil {
		slim.Status.Conditions = []batchv1.JobCondition{*c}
	}
	return slim, nil
}

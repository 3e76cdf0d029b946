package cache

import (
	"errors"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

// CachedJob is a managed Job as the JobCache holds it: what SlimJob keeps, in a type a fifth the
// size of a Job (a batchv1.Job is 1.3 KB before anything is set, most of it the pod template's
// fields).
type CachedJob struct {
	metav1.ObjectMeta
	startTime, completionTime *metav1.Time
	// finish is the finish condition, nil while the Job runs.
	finish *batchv1.JobCondition
}

var _ client.Object = &CachedJob{}

// CachedJobOf is what the JobCache holds of job.
func CachedJobOf(job *batchv1.Job) *CachedJob {
	slim, _ := SlimJob(job)
	s := slim.(*batchv1.Job)
	c := &CachedJob{ObjectMeta: s.ObjectMeta, startTime: s.Status.StartTime, completionTime: s.Status.CompletionTime}
	if len(s.Status.Conditions) > 0 {
		c.finish = &s.Status.Conditions[0]
	}
	return c
}

// Job returns the Job SlimJob would have kept, sharing nothing with c.
func (c *CachedJob) Job() batchv1.Job {
	job := batchv1.Job{TypeMeta: metav1.TypeMeta{APIVersion: batchv1.SchemeGroupVersion.String(), Kind: "Job"}}
	c.ObjectMeta.DeepCopyInto(&job.ObjectMeta)
	job.Status.StartTime = c.startTime.DeepCopy()
	job.Status.CompletionTime = c.completionTime.DeepCopy()
	if c.finish != nil {
		job.Status.Conditions = []batchv1.JobCondition{*c.finish.DeepCopy()}
	}
	return job
}

// shared returns the Job that Job returns, sharing c's maps and times: for reads that neither
// change nor keep it.
func (c *CachedJob) shared() batchv1.Job {
	job := batchv1.Job{TypeMeta: metav1.TypeMeta{APIVersion: batchv1.SchemeGroupVersion.String(), Kind: "Job"}, ObjectMeta: c.ObjectMeta}
	job.Status.StartTime, job.Status.CompletionTime = c.startTime, c.completionTime
	if c.finish != nil {
		job.Status.Conditions = []batchv1.JobCondition{*c.finish}
	}
	return job
}

// Finished reports whether the Job has ended, as jobs.OutcomeOf(...).Finished() would.
func (c *CachedJob) Finished() bool { return c.finish != nil }

// GetObjectKind implements runtime.Object.
func (c *CachedJob) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object.
func (c *CachedJob) DeepCopyObject() runtime.Object {
	out := &CachedJob{startTime: c.startTime.DeepCopy(), completionTime: c.completionTime.DeepCopy(), finish: c.finish.DeepCopy()}
	c.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

// JobCache is the controller's cache of managed Jobs. The manager's cache would hold each as a
// batchv1.Job; this one holds CachedJobs, indexed by their owner labels, and feeds the
// reconcilers' watches of their Jobs. It is a manager runnable.
type JobCache struct {
	ownInformer
}

// byOwner indexes the cached Jobs by namespace, owner kind and owner name labels.
const byOwner = "captf.owner"

func ownerKey(namespace string, kind jobs.Kind, name string) string {
	return namespace + "/" + string(kind) + "/" + jobs.LabelValue(name)
}

// NewJobCache returns the cache of the Jobs labelled captf.io/managed=true, and with every label
// of also, that cfg can list in namespace (every namespace when ""). Setup adds it to the
// manager, which starts it.
func NewJobCache(cfg *rest.Config, namespace string, also map[string]string) (*JobCache, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("making the Job cache's client: %w", err)
	}
	indexers := toolscache.Indexers{byOwner: func(obj any) ([]string, error) {
		c, ok := obj.(*CachedJob)
		if !ok {
			return nil, nil
		}
		return []string{c.Namespace + "/" + c.Labels[jobs.LabelOwnerKind] + "/" + c.Labels[jobs.LabelOwnerName]}, nil
	}}
	own, err := newOwnInformer(jobs.ManagedJobsIn(cs, namespace, also), &batchv1.Job{}, indexers, func(job *batchv1.Job) any {
		return interned(CachedJobOf(job))
	}, ErrJobCacheNotSynced, "Job cache")
	if err != nil {
		return nil, err
	}
	return &JobCache{ownInformer: own}, nil
}

// ErrJobCacheNotSynced is returned by reads before the cache has listed the Jobs: an empty list
// then would mean "no Jobs" and repeat attempts already made.
var ErrJobCacheNotSynced = errors.New("the Job cache has not listed the Jobs yet")

// OwnerJobs returns the cached Jobs labelled as runs of the named object, as Jobs.
func (c *JobCache) OwnerJobs(namespace string, kind jobs.Kind, name string) ([]batchv1.Job, error) {
	if !c.informer.HasSynced() {
		return nil, ErrJobCacheNotSynced
	}
	objs, err := c.informer.GetIndexer().ByIndex(byOwner, ownerKey(namespace, kind, name))
	if err != nil {
		return nil, fmt.Errorf("reading the Job cache: %w", err)
	}
	out := make([]batchv1.Job, 0, len(objs))
	for _, o := range objs {
		if cj, ok := o.(*CachedJob); ok {
			out = append(out, cj.Job())
		}
	}
	return out, nil
}

// AppendOwnerJobs appends to buf the cached Jobs labelled as runs of the named object, as Jobs
// that share the cache's maps and times (see CachedJob.shared): for reads that neither change
// nor keep them, such as a scrape's, which would otherwise copy every Job the cache holds.
func (c *JobCache) AppendOwnerJobs(buf []batchv1.Job, namespace string, kind jobs.Kind, name string) ([]batchv1.Job, error) {
	if !c.informer.HasSynced() {
		return buf, ErrJobCacheNotSynced
	}
	objs, err := c.informer.GetIndexer().ByIndex(byOwner, ownerKey(namespace, kind, name))
	if err != nil {
		return buf, fmt.Errorf("reading the Job cache: %w", err)
	}
	for _, o := range objs {
		if cj, ok := o.(*CachedJob); ok {
			buf = append(buf, cj.shared())
		}
	}
	return buf, nil
}

// Len is how many Jobs the cache holds.
func (c *JobCache) Len() int { return len(c.informer.GetStore().ListKeys()) }

// Each calls fn with every cached Job, which fn must not change.
func (c *JobCache) Each(fn func(*CachedJob)) {
	for _, o := range c.informer.GetStore().List() {
		if cj, ok := o.(*CachedJob); ok {
			fn(cj)
		}
	}
}

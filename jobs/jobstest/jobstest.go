// Package jobstest builds retained Jobs in a given state for the tests of the packages that use
// the run model. It sets what the Job controller and the bookkeeping would have set.
package jobstest

import (
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/captf/captf/jobs"
)

// RunTime is how long every built Job runs before it finishes.
const RunTime = 5 * time.Minute

// Builder describes a Job to build.
type Builder struct {
	Kind      jobs.Kind
	Name      string
	Namespace string
	Op        jobs.Op
	Attempt   int32
	Outcome   jobs.Outcome
	// Created is when the Job was created and started; it finishes RunTime later.
	Created     time.Time
	Annotations map[string]string
}

// Job builds the Job: labels of the run model, a start time, and for a finished outcome the
// finish condition and the bookkeeping mark that outcome implies.
func (b Builder) Job() batchv1.Job {
	if b.Namespace == "" {
		b.Namespace = "default"
	}
	j := batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:              fmt.Sprintf("captf-%s-%s-%s-a%d-000000", b.Kind.Short(), b.Name, b.Op, b.Attempt),
			Namespace:         b.Namespace,
			CreationTimestamp: metav1.NewTime(b.Created),
			Labels:            jobs.Labels(b.Kind, b.Name, "", b.Op, b.Attempt),
			Annotations:       map[string]string{},
		},
	}
	for k, v := range b.Annotations {
		j.Annotations[k] = v
	}
	start := metav1.NewTime(b.Created)
	j.Status.StartTime = &start
	finish := metav1.NewTime(b.Created.Add(RunTime))
	condition := func(t batchv1.JobConditionType, reason string) {
		j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{
			Type: t, Status: corev1.ConditionTrue, Reason: reason, LastTransitionTime: finish,
		})
	}
	switch b.Outcome {
	case jobs.OutcomeRunning:
		return j
	case jobs.OutcomeSucceeded:
		condition(batchv1.JobComplete, "")
		j.Status.CompletionTime = &finish
	case jobs.OutcomePlanUnreadable:
		condition(batchv1.JobComplete, "")
		j.Status.CompletionTime = &finish
		j.Annotations[jobs.AnnotationPlanUnreadable] = "true"
	case jobs.OutcomeDeadlineExceeded:
		condition(batchv1.JobFailed, batchv1.JobReasonDeadlineExceeded)
	default:
		condition(batchv1.JobFailed, batchv1.JobReasonBackoffLimitExceeded)
		switch b.Outcome {
		case jobs.OutcomeInterrupted:
			j.Annotations[jobs.AnnotationInterrupted] = "true"
		case jobs.OutcomeBlocked:
			j.Annotations[jobs.AnnotationDestructivePlanBlocked] = "true"
		case jobs.OutcomePlanChanged:
			j.Annotations[jobs.AnnotationPlanChanged] = "true"
		}
	}
	j.Annotations[jobs.AnnotationBookkept] = "true"
	return j
}

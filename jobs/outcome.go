package jobs

import (
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// Outcome is how a Job ended, or that it has not. Each Outcome is spelled as the
// runs.RunPhase of the same meaning, so that a run's phase is its Outcome converted.
type Outcome string

// The outcomes of a Job.
const (
	// OutcomeRunning: the Job has neither a Complete nor a Failed condition.
	OutcomeRunning Outcome = "Running"
	// OutcomeSucceeded: the Job completed.
	OutcomeSucceeded Outcome = "Succeeded"
	// OutcomeFailed: the Job failed for any reason not listed below.
	OutcomeFailed Outcome = "Failed"
	// OutcomeDeadlineExceeded: activeDeadlineSeconds killed the Job, whatever the runner said.
	OutcomeDeadlineExceeded Outcome = "DeadlineExceeded"
	// OutcomeInterrupted: the runner was stopped from outside, not by the deadline.
	OutcomeInterrupted Outcome = "Interrupted"
	// OutcomeBlocked: an apply stopped before a plan that deletes or replaces.
	OutcomeBlocked Outcome = "Blocked"
	// OutcomePlanChanged: an approved apply found that its plan no longer matched.
	OutcomePlanChanged Outcome = "PlanChanged"
	// OutcomePlanUnreadable: a plan Job completed without a readable plan.
	OutcomePlanUnreadable Outcome = "PlanUnreadable"
)

// OutcomeOf classifies a Job from its conditions and the marks written at bookkeeping:
//   - no Complete or Failed condition: Running;
//   - Complete: PlanUnreadable when marked so, else Succeeded;
//   - Failed with reason DeadlineExceeded: DeadlineExceeded, before any mark, because a step that
//     always hangs must reach the backoff cap even when the runner reported an interruption;
//   - Failed and marked blocked, plan-changed or interrupted: that outcome;
//   - Failed otherwise: Failed.
func OutcomeOf(job *batchv1.Job) Outcome {
	cond := FinishCondition(job)
	switch {
	case cond == nil:
		return OutcomeRunning
	case cond.Type == batchv1.JobComplete:
		if hasMark(job.Annotations, AnnotationPlanUnreadable) {
			return OutcomePlanUnreadable
		}
		return OutcomeSucceeded
	case cond.Reason == batchv1.JobReasonDeadlineExceeded:
		return OutcomeDeadlineExceeded
	case hasMark(job.Annotations, AnnotationDestructivePlanBlocked):
		return OutcomeBlocked
	case hasMark(job.Annotations, AnnotationPlanChanged):
		return OutcomePlanChanged
	case hasMark(job.Annotations, AnnotationInterrupted):
		return OutcomeInterrupted
	}
	return OutcomeFailed
}

// Finished reports whether the Job has ended.
func (o Outcome) Finished() bool { return o != OutcomeRunning && o != "" }

// Succeeded reports whether the outcome is a success of the op, the one thing that ends a
// failure streak.
func (o Outcome) Succeeded() bool { return o == OutcomeSucceeded }

// CountsAsFailure reports whether the outcome counts toward backoff, the retry number and the
// remediation cap. An interruption from outside is free; blocked and plan-changed runs changed
// nothing and wait for a person, not a timer.
func (o Outcome) CountsAsFailure() bool {
	switch o {
	case OutcomeFailed, OutcomeDeadlineExceeded, OutcomePlanUnreadable:
		return true
	}
	return false
}

// MetricResult returns the value of the result label of captf_jobs_total for a finished Job:
// succeeded, failed, deadline, interrupted, blocked or plan_changed. An unreadable plan is a
// failed plan. A running Job has none.
func (o Outcome) MetricResult() string {
	switch o {
	case OutcomeSucceeded:
		return "succeeded"
	case OutcomeFailed, OutcomePlanUnreadable:
		return "failed"
	case OutcomeDeadlineExceeded:
		return "deadline"
	case OutcomeInterrupted:
		return "interrupted"
	case OutcomeBlocked:
		return "blocked"
	case OutcomePlanChanged:
		return "plan_changed"
	}
	return ""
}

// FinishCondition returns the Job's true Complete or Failed condition, or nil while it runs.
func FinishCondition(job *batchv1.Job) *batchv1.JobCondition {
	for i := range job.Status.Conditions {
		c := &job.Status.Conditions[i]
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

// FinishedAt returns when the Job finished: the Complete or Failed condition's transition time,
// else status.completionTime. It returns false while the Job runs or when neither is recorded.
func FinishedAt(job *batchv1.Job) (time.Time, bool) {
	cond := FinishCondition(job)
	if cond == nil {
		return time.Time{}, false
	}
	if !cond.LastTransitionTime.IsZero() {
		return cond.LastTransitionTime.Time, true
	}
	if job.Status.CompletionTime != nil && !job.Status.CompletionTime.IsZero() {
		return job.Status.CompletionTime.Time, true
	}
	return time.Time{}, false
}

// StartedAt returns when the Job started: status.startTime, else its creation time. It returns
// false when neither is recorded.
func StartedAt(job *batchv1.Job) (time.Time, bool) {
	if job.Status.StartTime != nil && !job.Status.StartTime.IsZero() {
		return job.Status.StartTime.Time, true
	}
	if !job.CreationTimestamp.IsZero() {
		return job.CreationTimestamp.Time, true
	}
	return time.Time{}, false
}

// OpOf returns the Op in the Job's op label, or "" when the label is missing or unknown.
func OpOf(job *batchv1.Job) Op {
	op := Op(job.Labels[LabelOp])
	if !op.Valid() {
		return ""
	}
	return op
}

// MaxAttempt is the highest attempt a Job label may carry. At the 10-minute backoff cap it is
// nearly twenty years of retries, so no real history reaches it; a label above it was written
// by hand and must not push the next attempt to a name that can never be created again.
const MaxAttempt = 1_000_000

// AttemptOf returns the attempt in the Job's attempt label. A missing or unparsable label, or a
// value below 1 or above MaxAttempt, reads as 0: such a Job then never raises the next attempt
// and sorts as the oldest of its op, which is the safe side for both.
func AttemptOf(job *batchv1.Job) int32 {
	n, err := strconv.ParseInt(job.Labels[LabelAttempt], 10, 32)
	if err != nil || n < 1 || n > MaxAttempt {
		return 0
	}
	return int32(n)
}

package jobs

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestOutcomeOf(t *testing.T) {
	failureTarget := func(j *batchv1.Job) {
		j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue}}
	}
	falseFailed := func(j *batchv1.Job) {
		j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionFalse}}
	}
	tests := []struct {
		name           string
		job            batchv1.Job
		want           Outcome
		countsAsFailed bool
		metric         string
	}{
		{"a Job without a Complete or Failed condition is running", mkJob(OpApply, 1, running), OutcomeRunning, false, ""},
		{"a Job only targeted for failure is still running", mkJob(OpApply, 1, running, failureTarget), OutcomeRunning, false, ""},
		{"a Failed condition that is not true does not finish a Job", mkJob(OpApply, 1, running, falseFailed), OutcomeRunning, false, ""},
		{"a complete Job succeeded", mkJob(OpApply, 1, succeeded), OutcomeSucceeded, false, "succeeded"},
		{"a failed Job failed and counts", mkJob(OpApply, 1, failed), OutcomeFailed, true, "failed"},
		{"a Job the deadline killed exceeded its deadline and counts", mkJob(OpApply, 1, deadline), OutcomeDeadlineExceeded, true, "deadline"},
		{"a deadline kill counts even when the runner reported interrupted", mkJob(OpApply, 1, deadlineInterrupted), OutcomeDeadlineExceeded, true, "deadline"},
		{"a Job stopped from outside, not by the deadline, is interrupted and free", mkJob(OpApply, 1, interrupted), OutcomeInterrupted, false, "interrupted"},
		{"an apply stopped before a destructive plan is blocked and free", mkJob(OpApply, 1, blocked), OutcomeBlocked, false, "blocked"},
		{"an approved apply whose plan no longer matched is plan-changed and free", mkJob(OpApply, 1, planChanged), OutcomePlanChanged, false, "plan_changed"},
		{"a plan that succeeded without a readable plan is unreadable and counts", mkJob(OpPlan, 1, planUnreadable), OutcomePlanUnreadable, true, "failed"},
		{"marks are read only once a Job finished", mkJob(OpApply, 1, running, annotate(AnnotationInterrupted, "true")), OutcomeRunning, false, ""},
		{"a mark set to false is no mark", mkJob(OpApply, 1, failed, annotate(AnnotationInterrupted, "false")), OutcomeFailed, true, "failed"},
		{"blocked and plan-changed marks do not turn a success into a failure", mkJob(OpApply, 1, succeeded, annotate(AnnotationDestructivePlanBlocked, "true")), OutcomeSucceeded, false, "succeeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := OutcomeOf(&tt.job)
			if got != tt.want {
				t.Fatalf("OutcomeOf() = %s, want %s", got, tt.want)
			}
			if got.CountsAsFailure() != tt.countsAsFailed {
				t.Errorf("CountsAsFailure() = %v, want %v", got.CountsAsFailure(), tt.countsAsFailed)
			}
			if got.MetricResult() != tt.metric {
				t.Errorf("MetricResult() = %q, want %q", got.MetricResult(), tt.metric)
			}
			if got.Finished() != (tt.want != OutcomeRunning) {
				t.Errorf("Finished() = %v", got.Finished())
			}
			if got.Succeeded() != (tt.want == OutcomeSucceeded) {
				t.Errorf("Succeeded() = %v", got.Succeeded())
			}
		})
	}
}

func TestFinishedAt(t *testing.T) {
	noTransition := func(j *batchv1.Job) { j.Status.Conditions[0].LastTransitionTime = metav1.Time{} }
	noCompletion := func(j *batchv1.Job) { j.Status.CompletionTime = nil }
	tests := []struct {
		name   string
		job    batchv1.Job
		want   time.Time
		wantOK bool
	}{
		{"a finished Job finished when its condition turned true", mkJob(OpApply, 1, failed, finishedAt(at(99))), at(99), true},
		{"without a transition time, status.completionTime tells", mkJob(OpApply, 1, succeeded, noTransition), at(15), true},
		{"without either, the finish is unknown", mkJob(OpApply, 1, succeeded, noTransition, noCompletion), time.Time{}, false},
		{"a running Job has not finished", mkJob(OpApply, 1, running), time.Time{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := FinishedAt(&tt.job)
			if !got.Equal(tt.want) || ok != tt.wantOK {
				t.Errorf("FinishedAt() = %v, %v, want %v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestStartedAt(t *testing.T) {
	started := func(j *batchv1.Job) { j.Status.StartTime = ptr.To(metav1.NewTime(at(12))) }
	uncreated := func(j *batchv1.Job) { j.CreationTimestamp = metav1.Time{} }
	tests := []struct {
		name   string
		job    batchv1.Job
		want   time.Time
		wantOK bool
	}{
		{"a Job starts at status.startTime", mkJob(OpApply, 1, running, started), at(12), true},
		{"a Job without a start time counts from its creation", mkJob(OpApply, 1, pending), at(10), true},
		{"a Job without either has no start", mkJob(OpApply, 1, pending, uncreated), time.Time{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := StartedAt(&tt.job)
			if !got.Equal(tt.want) || ok != tt.wantOK {
				t.Errorf("StartedAt() = %v, %v, want %v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestAttemptAndOpOf(t *testing.T) {
	tests := []struct {
		name        string
		job         batchv1.Job
		wantAttempt int32
		wantOp      Op
	}{
		{"the attempt label is decimal", mkJob(OpDrift, 40, running), 40, OpDrift},
		{"a missing attempt label reads as 0", mkJob(OpApply, 1, running, label(LabelAttempt, "")), 0, OpApply},
		{"a garbage attempt label reads as 0", mkJob(OpApply, 1, running, label(LabelAttempt, "a3")), 0, OpApply},
		{"an attempt below 1 reads as 0", mkJob(OpApply, 1, running, label(LabelAttempt, "-4")), 0, OpApply},
		{"an attempt past 32 bits reads as 0", mkJob(OpApply, 1, running, label(LabelAttempt, "4294967296")), 0, OpApply},
		{"an unknown op reads as none", mkJob(OpApply, 1, running, label(LabelOp, "import")), 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := AttemptOf(&tt.job); got != tt.wantAttempt {
				t.Errorf("AttemptOf() = %d, want %d", got, tt.wantAttempt)
			}
			if got := OpOf(&tt.job); got != tt.wantOp {
				t.Errorf("OpOf() = %q, want %q", got, tt.wantOp)
			}
		})
	}
}

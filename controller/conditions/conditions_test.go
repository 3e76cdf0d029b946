package conditions

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var now = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func TestSetReady(t *testing.T) {
	for _, tc := range []struct {
		rule       string
		set        func(*[]metav1.Condition)
		wantStatus metav1.ConditionStatus
		wantReason string
	}{
		{"no apply yet is Unknown", func(*[]metav1.Condition) {}, metav1.ConditionUnknown, ReasonNoApplyYet},
		{"a succeeded apply is Ready", func(c *[]metav1.Condition) {
			Set(c, cond(ApplyJobSucceeded, metav1.ConditionTrue, ReasonApplySucceeded, "ok", 1, now))
		}, metav1.ConditionTrue, ReasonReady},
		{"a failed apply is not Ready, with its reason", func(c *[]metav1.Condition) {
			Set(c, cond(ApplyJobSucceeded, metav1.ConditionFalse, ReasonApplyFailed, "boom", 1, now))
		}, metav1.ConditionFalse, ReasonApplyFailed},
		{"a wait is Unknown, never False", func(c *[]metav1.Condition) {
			Set(c, cond(ApplyJobSucceeded, metav1.ConditionUnknown, ReasonWaitingForRunLease, "", 1, now))
		}, metav1.ConditionUnknown, ReasonWaitingForRunLease},
		{"unreadable state is not Ready even after a good apply", func(c *[]metav1.Condition) {
			Set(c, cond(ApplyJobSucceeded, metav1.ConditionTrue, ReasonApplySucceeded, "ok", 1, now))
			Set(c, cond(StateReadable, metav1.ConditionFalse, ReasonStateCorrupt, "bad", 1, now))
		}, metav1.ConditionFalse, ReasonStateCorrupt},
		{"a ServiceAccount not opted in is not Ready even after a good apply", func(c *[]metav1.Condition) {
			Set(c, cond(ApplyJobSucceeded, metav1.ConditionTrue, ReasonApplySucceeded, "ok", 1, now))
			Set(c, cond(RunnerRBACReady, metav1.ConditionFalse, ReasonServiceAccountNotOptedIn, "no label", 1, now))
		}, metav1.ConditionFalse, ReasonServiceAccountNotOptedIn},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			var conds []metav1.Condition
			tc.set(&conds)
			SetReady(&conds, 1, now)
			ready := Get(conds, Ready)
			if ready.Status != tc.wantStatus || ready.Reason != tc.wantReason {
				t.Fatalf("Ready = %s/%s, want %s/%s", ready.Status, ready.Reason, tc.wantStatus, tc.wantReason)
			}
		})
	}
}

func TestTransitionTimeMovesOnlyWithTheStatus(t *testing.T) {
	var conds []metav1.Condition
	Set(&conds, cond(ApplyJobSucceeded, metav1.ConditionFalse, ReasonApplyFailed, "a", 1, now))
	Set(&conds, cond(ApplyJobSucceeded, metav1.ConditionFalse, ReasonJobDeadlineExceeded, "b", 2, now.Add(time.Hour)))
	if c := Get(conds, ApplyJobSucceeded); !c.LastTransitionTime.Time.Equal(now) || c.Reason != ReasonJobDeadlineExceeded || c.ObservedGeneration != 2 {
		t.Fatalf("condition = %+v", c)
	}
	Set(&conds, cond(ApplyJobSucceeded, metav1.ConditionTrue, ReasonApplySucceeded, "", 2, now.Add(time.Hour)))
	if c := Get(conds, ApplyJobSucceeded); !c.LastTransitionTime.Time.Equal(now.Add(time.Hour)) || !IsTrue(conds, ApplyJobSucceeded) {
		t.Fatalf("condition = %+v", c)
	}
}

func cond(conditionType string, status metav1.ConditionStatus, reason, message string, generation int64, at time.Time) metav1.Condition {
	return metav1.Condition{Type: conditionType, Status: status, Reason: reason, Message: message, ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(at)}
}

func TestAwaitingApproval(t *testing.T) {
	earlier := now.Add(-time.Hour)
	for _, tc := range []struct {
		rule        string
		set         func(*[]metav1.Condition)
		wantWaiting bool
		wantSince   time.Time
	}{
		{"no apply condition waits for nothing", func(*[]metav1.Condition) {}, false, time.Time{}},
		{"a plan awaiting approval waits since the condition's transition", func(c *[]metav1.Condition) {
			Set(c, cond(ApplyJobSucceeded, metav1.ConditionUnknown, ReasonPlanAwaitingApproval, "approve", 1, now))
		}, true, now},
		{"a changed plan waits for approval too", func(c *[]metav1.Condition) {
			Set(c, cond(ApplyJobSucceeded, metav1.ConditionUnknown, ReasonPlanChanged, "approve the new plan", 1, now))
		}, true, now},
		{"a plan that replaces a waiting one keeps the wait of the first", func(c *[]metav1.Condition) {
			Set(c, cond(ApplyJobSucceeded, metav1.ConditionUnknown, ReasonPlanAwaitingApproval, "plan a", 1, earlier))
			Set(c, cond(ApplyJobSucceeded, metav1.ConditionUnknown, ReasonPlanChanged, "plan b", 2, now))
		}, true, earlier},
		{"a plan after a succeeded apply waits from when it was made", func(c *[]metav1.Condition) {
			Set(c, cond(ApplyJobSucceeded, metav1.ConditionTrue, ReasonApplySucceeded, "ok", 1, earlier))
			Set(c, cond(ApplyJobSucceeded, metav1.ConditionUnknown, ReasonPlanAwaitingApproval, "approve", 2, now))
		}, true, now},
		{"a running apply waits for no approval", func(c *[]metav1.Condition) {
			Set(c, cond(ApplyJobSucceeded, metav1.ConditionUnknown, ReasonApplyRunning, "running", 1, now))
		}, false, time.Time{}},
		{"a blocked destructive plan is a failed apply, not a plan awaiting approval", func(c *[]metav1.Condition) {
			Set(c, cond(ApplyJobSucceeded, metav1.ConditionFalse, ReasonDestructivePlanBlocked, "blocked", 1, now))
		}, false, time.Time{}},
		{"an applied plan waits no more", func(c *[]metav1.Condition) {
			Set(c, cond(ApplyJobSucceeded, metav1.ConditionUnknown, ReasonPlanAwaitingApproval, "approve", 1, earlier))
			Set(c, cond(ApplyJobSucceeded, metav1.ConditionTrue, ReasonApplySucceeded, "ok", 1, now))
		}, false, time.Time{}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			var conds []metav1.Condition
			tc.set(&conds)
			since, waiting := AwaitingApproval(conds)
			if waiting != tc.wantWaiting || !since.Equal(tc.wantSince) {
				t.Fatalf("AwaitingApproval = %v, %v; want %v, %v", since, waiting, tc.wantSince, tc.wantWaiting)
			}
		})
	}
}

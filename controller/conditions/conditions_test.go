package conditions

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var now = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func TestSetReady(t *testing.T) {
	applied := func(c *[]metav1.Condition) {
		Set(c, cond(ApplyJobSucceeded, metav1.ConditionTrue, ReasonApplySucceeded, "ok", 1, now))
	}
	healthy := func(c *[]metav1.Condition) {
		Set(c, cond(InfrastructureHealthy, metav1.ConditionTrue, ReasonHealthy, "running", 1, now))
	}
	provisioned := ReadyInputs{Provisioned: true}
	pool := ReadyInputs{Provisioned: true, AppliesAfterProvisioning: true}
	for _, tc := range []struct {
		rule       string
		in         ReadyInputs
		set        []func(*[]metav1.Condition)
		wantStatus metav1.ConditionStatus
		wantReason string
	}{
		// Until provisioned: the runs and what they need.
		{"no apply yet is Unknown", ReadyInputs{}, nil, metav1.ConditionUnknown, ReasonNoApplyYet},
		{"a succeeded apply with valid outputs and a healthy infrastructure is Ready", ReadyInputs{}, []func(*[]metav1.Condition){applied, healthy, func(c *[]metav1.Condition) {
			Set(c, cond(OutputsValid, metav1.ConditionTrue, ReasonOutputsValid, "ok", 1, now))
		}}, metav1.ConditionTrue, ReasonReady},
		{"a failed apply before provisioning is not Ready, with its reason", ReadyInputs{}, []func(*[]metav1.Condition){func(c *[]metav1.Condition) {
			Set(c, cond(ApplyJobSucceeded, metav1.ConditionFalse, ReasonApplyFailed, "boom", 1, now))
		}}, metav1.ConditionFalse, ReasonApplyFailed},
		{"a wait is Unknown, never False", ReadyInputs{}, []func(*[]metav1.Condition){func(c *[]metav1.Condition) {
			Set(c, cond(ApplyJobSucceeded, metav1.ConditionUnknown, ReasonWaitingForRunLease, "", 1, now))
		}}, metav1.ConditionUnknown, ReasonWaitingForRunLease},
		{"a lock before provisioning is Unknown, never False", ReadyInputs{}, []func(*[]metav1.Condition){applied, func(c *[]metav1.Condition) {
			Set(c, cond(StateReadable, metav1.ConditionFalse, ReasonStateLocked, "held", 1, now))
		}}, metav1.ConditionUnknown, ReasonStateLocked},
		{"unreadable state is not Ready even after a good apply", ReadyInputs{}, []func(*[]metav1.Condition){applied, func(c *[]metav1.Condition) {
			Set(c, cond(StateReadable, metav1.ConditionFalse, ReasonStateCorrupt, "bad", 1, now))
		}}, metav1.ConditionFalse, ReasonStateCorrupt},
		{"a ServiceAccount not opted in is not Ready even after a good apply", ReadyInputs{}, []func(*[]metav1.Condition){applied, func(c *[]metav1.Condition) {
			Set(c, cond(RunnerRBACReady, metav1.ConditionFalse, ReasonServiceAccountNotOptedIn, "no label", 1, now))
		}}, metav1.ConditionFalse, ReasonServiceAccountNotOptedIn},
		{"outputs that break the contract keep an applied object not Ready", ReadyInputs{}, []func(*[]metav1.Condition){applied, healthy, func(c *[]metav1.Condition) {
			Set(c, cond(OutputsValid, metav1.ConditionFalse, ReasonFailureDomainMismatch, "elsewhere", 1, now))
		}}, metav1.ConditionFalse, ReasonFailureDomainMismatch},
		{"a pending instance keeps an applied object not Ready", ReadyInputs{}, []func(*[]metav1.Condition){applied, func(c *[]metav1.Condition) {
			Set(c, cond(InfrastructureHealthy, metav1.ConditionFalse, ReasonInstancePending, "booting", 1, now))
		}}, metav1.ConditionFalse, ReasonInstancePending},
		// Once provisioned: the infrastructure's health.
		{"a provisioned healthy infrastructure is Ready", provisioned, []func(*[]metav1.Condition){applied, healthy}, metav1.ConditionTrue, ReasonReady},
		{"a terminated instance after provisioning is not Ready, with InstanceTerminated", provisioned, []func(*[]metav1.Condition){applied, func(c *[]metav1.Condition) {
			Set(c, cond(InfrastructureHealthy, metav1.ConditionFalse, ReasonInstanceTerminated, "gone", 1, now))
		}}, metav1.ConditionFalse, ReasonInstanceTerminated},
		{"unknown health after provisioning is Unknown", provisioned, []func(*[]metav1.Condition){applied, func(c *[]metav1.Condition) {
			Set(c, cond(InfrastructureHealthy, metav1.ConditionUnknown, ReasonHealthUnknown, "cannot tell", 1, now))
		}}, metav1.ConditionUnknown, ReasonHealthUnknown},
		{"a failed re-apply after provisioning leaves Ready to the health", provisioned, []func(*[]metav1.Condition){healthy, func(c *[]metav1.Condition) {
			Set(c, cond(ApplyJobSucceeded, metav1.ConditionFalse, ReasonApplyFailed, "boom", 1, now))
		}}, metav1.ConditionTrue, ReasonReady},
		{"a plan awaiting approval after provisioning leaves Ready to the health", provisioned, []func(*[]metav1.Condition){healthy, func(c *[]metav1.Condition) {
			Set(c, cond(ApplyJobSucceeded, metav1.ConditionUnknown, ReasonPlanAwaitingApproval, "approve", 1, now))
		}}, metav1.ConditionTrue, ReasonReady},
		{"a blocked destructive plan after provisioning leaves Ready to the health", provisioned, []func(*[]metav1.Condition){healthy, func(c *[]metav1.Condition) {
			Set(c, cond(ApplyJobSucceeded, metav1.ConditionFalse, ReasonDestructivePlanBlocked, "blocked", 1, now))
		}}, metav1.ConditionTrue, ReasonReady},
		{"a state lock after provisioning leaves Ready to the health", provisioned, []func(*[]metav1.Condition){applied, healthy, func(c *[]metav1.Condition) {
			Set(c, cond(StateReadable, metav1.ConditionFalse, ReasonStateLocked, "held", 1, now))
		}}, metav1.ConditionTrue, ReasonReady},
		{"a revoked identity after provisioning leaves Ready to the health", provisioned, []func(*[]metav1.Condition){applied, healthy, func(c *[]metav1.Condition) {
			Set(c, cond(IdentityAllowed, metav1.ConditionFalse, ReasonNamespaceNotAllowed, "revoked", 1, now))
		}}, metav1.ConditionTrue, ReasonReady},
		{"a wait for Cluster API after provisioning leaves Ready to the health", provisioned, []func(*[]metav1.Condition){applied, healthy, func(c *[]metav1.Condition) {
			Set(c, cond(DependenciesReady, metav1.ConditionUnknown, ReasonWaitingForOwner, "no owner", 1, now))
		}}, metav1.ConditionTrue, ReasonReady},
		{"a pool's failed re-apply is not Ready", pool, []func(*[]metav1.Condition){healthy, func(c *[]metav1.Condition) {
			Set(c, cond(ApplyJobSucceeded, metav1.ConditionFalse, ReasonApplyFailed, "boom", 1, now))
		}}, metav1.ConditionFalse, ReasonApplyFailed},
		{"a deleting object is not Ready", ReadyInputs{Provisioned: true, Deleting: true}, []func(*[]metav1.Condition){applied, healthy}, metav1.ConditionFalse, ReasonDeleting},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			var conds []metav1.Condition
			for _, set := range tc.set {
				set(&conds)
			}
			SetReady(&conds, tc.in, 1, now)
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

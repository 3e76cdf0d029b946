package decide

import (
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/jobs"
)

const planHash = "p3:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func driftJob(attempt int32, minute int, detected bool) batchv1.Job {
	summary, _ := jobs.EncodeSummary(jobs.Summary{Outcome: jobs.OutcomeSucceeded, Drift: &jobs.DriftSummary{Detected: detected, Change: 1}})
	return job(jobs.OpDrift, attempt, jobs.OutcomeSucceeded, minute, jobs.AnnotationResult, summary)
}

func TestGatedApplies(t *testing.T) {
	for _, tc := range []struct {
		rule       string
		change     func(*Input)
		wantOp     jobs.Op
		wantReason string
		check      func(*testing.T, Decision)
	}{
		{"manual: changed inputs without a plan start a plan", func(in *Input) {
			in.Manual, in.CurrentInputsHash = true, "h1:new"
		}, jobs.OpPlan, InputsChanged, nil},
		{"manual: a plan of other inputs is planned again", func(in *Input) {
			in.Manual, in.CurrentInputsHash, in.Plan = true, "h1:new", &Plan{InputsHash: "h1:older", PlanHash: planHash}
		}, jobs.OpPlan, InputsChanged, nil},
		{"manual: an old p1 plan is planned again", func(in *Input) {
			in.Manual, in.CurrentInputsHash, in.Plan = true, "h1:new", &Plan{InputsHash: "h1:new", PlanHash: "p1:abc"}
		}, jobs.OpPlan, InputsChanged, nil},
		{"manual: an approved p2 plan is planned again, not applied", func(in *Input) {
			old := "p2:" + strings.Repeat("ab", 32)
			in.Manual, in.CurrentInputsHash, in.Plan = true, "h1:new", &Plan{InputsHash: "h1:new", PlanHash: old}
			in.ApprovedPlan = old
		}, jobs.OpPlan, InputsChanged, nil},
		{"manual: an empty p2 plan is planned again, not applied", func(in *Input) {
			in.Manual, in.CurrentInputsHash, in.Plan = true, "h1:new", &Plan{InputsHash: "h1:new", PlanHash: "p2:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}
		}, jobs.OpPlan, InputsChanged, nil},
		{"manual: a current plan waits for approval and holds the schedule", func(in *Input) {
			in.Manual, in.CurrentInputsHash, in.Plan = true, "h1:new", &Plan{InputsHash: "h1:new", PlanHash: planHash}
			in.Drift.IntervalSeconds = nil
			in.Now = at(5000)
		}, "", PlanAwaitingApproval, func(t *testing.T, d Decision) {
			if d.RequeueAfter != ApprovalRequeue {
				t.Errorf("requeue %v", d.RequeueAfter)
			}
		}},
		{"manual: a stale approval never applies", func(in *Input) {
			in.Manual, in.CurrentInputsHash, in.Plan = true, "h1:new", &Plan{InputsHash: "h1:new", PlanHash: planHash}
			in.ApprovedPlan = "p3:ffff"
		}, "", PlanAwaitingApproval, nil},
		{"manual: the approved plan is applied with its hash expected", func(in *Input) {
			in.Manual, in.CurrentInputsHash, in.Plan = true, "h1:new", &Plan{InputsHash: "h1:new", PlanHash: planHash}
			in.ApprovedPlan = planHash
		}, jobs.OpApply, InputsChanged, func(t *testing.T, d Decision) {
			if d.ExpectPlan != planHash || d.Guard {
				t.Errorf("decision %+v", d)
			}
		}},
		{"manual: an empty plan needs no approval", func(in *Input) {
			in.Manual, in.CurrentInputsHash, in.Plan = true, "h1:new", &Plan{InputsHash: "h1:new", PlanHash: jobs.EmptyPlanHash}
		}, jobs.OpApply, InputsChanged, func(t *testing.T, d Decision) {
			if d.ExpectPlan != jobs.EmptyPlanHash {
				t.Errorf("decision %+v", d)
			}
		}},
		{"ReplanRequested: a plan waiting for approval is planned again", func(in *Input) {
			in.Manual, in.CurrentInputsHash, in.Plan = true, "h1:new", &Plan{InputsHash: "h1:new", PlanHash: planHash}
			in.Replan = "2026-11-01T12:00:00Z"
			in.Jobs = append(in.Jobs, job(jobs.OpPlan, 1, jobs.OutcomeSucceeded, 900))
		}, jobs.OpPlan, ReplanRequested, func(t *testing.T, d Decision) {
			if d.Replan != "2026-11-01T12:00:00Z" || d.Names.CurrentInputsHash != "h1:new" {
				t.Errorf("decision %+v", d)
			}
		}},
		{"ReplanRequested: an approved plan not yet applied is planned again", func(in *Input) {
			in.Manual, in.CurrentInputsHash, in.Plan = true, "h1:new", &Plan{InputsHash: "h1:new", PlanHash: planHash}
			in.ApprovedPlan, in.Replan = planHash, "r1"
		}, jobs.OpPlan, ReplanRequested, nil},
		{"ReplanRequested: a request a plan Job carries is planned once", func(in *Input) {
			in.Manual, in.CurrentInputsHash, in.Plan = true, "h1:new", &Plan{InputsHash: "h1:new", PlanHash: planHash}
			in.Replan = "r1"
			in.Jobs = append(in.Jobs, job(jobs.OpPlan, 2, jobs.OutcomeSucceeded, 900, jobs.AnnotationReplan, "r1"))
		}, "", PlanAwaitingApproval, nil},
		{"ReplanRequested: a new request after a handled one plans again", func(in *Input) {
			in.Manual, in.CurrentInputsHash, in.Plan = true, "h1:new", &Plan{InputsHash: "h1:new", PlanHash: planHash}
			in.Replan = "r2"
			in.Jobs = append(in.Jobs, job(jobs.OpPlan, 2, jobs.OutcomeSucceeded, 900, jobs.AnnotationReplan, "r1"))
		}, jobs.OpPlan, ReplanRequested, nil},
		{"ReplanRequested: a plan for changed inputs serves the request too", func(in *Input) {
			in.Manual, in.CurrentInputsHash, in.Plan = true, "h1:newer", &Plan{InputsHash: "h1:new", PlanHash: planHash}
			in.Replan = "r1"
			in.Jobs = append(in.Jobs, job(jobs.OpPlan, 2, jobs.OutcomeSucceeded, 900, jobs.AnnotationReplan, "r1"))
		}, jobs.OpPlan, InputsChanged, func(t *testing.T, d Decision) {
			if d.Replan != "r1" {
				t.Errorf("the plan does not record the request it serves: %+v", d)
			}
		}},
		{"ReplanRequested: the plan's backoff window is not skipped", func(in *Input) {
			in.Manual, in.CurrentInputsHash, in.Plan = true, "h1:new", &Plan{InputsHash: "h1:new", PlanHash: planHash}
			in.Replan = "r1"
			in.Jobs = append(in.Jobs, job(jobs.OpPlan, 2, jobs.OutcomeFailed, 999))
		}, "", ReplanRequested + BackoffSuffix, func(t *testing.T, d Decision) {
			if d.Backoff == nil || d.Replan != "" {
				t.Errorf("decision %+v", d)
			}
		}},
		{"ReplanRequested: with no apply due the request waits", func(in *Input) {
			in.Manual, in.Replan = true, "r1"
		}, "", UpToDate, nil},
		{"ReplanRequested: an object under Automatic ignores the request", func(in *Input) {
			in.CurrentInputsHash, in.Replan = "h1:new", "r1"
		}, jobs.OpApply, InputsChanged, nil},
		{"manual: the first apply with no state is never held", func(in *Input) {
			in.Manual, in.State, in.Jobs = true, state.State{}, nil
		}, jobs.OpApply, NoState, nil},
		{"manual: a plan-changed apply does not back off; the new plan waits", func(in *Input) {
			in.Manual, in.CurrentInputsHash, in.Plan = true, "h1:new", &Plan{InputsHash: "h1:new", PlanHash: "p3:new"}
			in.ApprovedPlan = planHash
			in.Jobs = append(in.Jobs, job(jobs.OpApply, 2, jobs.OutcomePlanChanged, 995))
		}, "", PlanAwaitingApproval, nil},
		{"manual: a failed approved apply retries the same plan after its backoff", func(in *Input) {
			in.Manual, in.CurrentInputsHash, in.Plan = true, "h1:new", &Plan{InputsHash: "h1:new", PlanHash: planHash}
			in.ApprovedPlan = planHash
			in.Jobs = append(in.Jobs, job(jobs.OpApply, 2, jobs.OutcomeFailed, 900))
		}, jobs.OpApply, InputsChanged, func(t *testing.T, d Decision) {
			if d.ExpectPlan != planHash {
				t.Errorf("decision %+v", d)
			}
		}},
		{"guard: a cluster apply stops before a destructive plan", func(in *Input) {
			in.Guarded, in.CurrentInputsHash = true, "h1:new"
		}, jobs.OpApply, InputsChanged, func(t *testing.T, d Decision) {
			if !d.Guard || d.AllowDeletesHash != "" {
				t.Errorf("decision %+v", d)
			}
		}},
		{"guard: the first apply is guarded too", func(in *Input) {
			in.Guarded, in.State, in.Jobs = true, state.State{}, nil
		}, jobs.OpApply, NoState, func(t *testing.T, d Decision) {
			if !d.Guard {
				t.Errorf("decision %+v", d)
			}
		}},
		{"guard: a blocked apply of the same inputs waits for approval", func(in *Input) {
			in.Guarded, in.CurrentInputsHash = true, "h1:new"
			in.Jobs = append(in.Jobs, job(jobs.OpApply, 2, jobs.OutcomeBlocked, 10, jobs.AnnotationInputsHash, "h1:new"))
		}, "", DestructivePlanBlocked, nil},
		{"guard: changed inputs after a block apply again", func(in *Input) {
			in.Guarded, in.CurrentInputsHash = true, "h1:newer"
			in.Jobs = append(in.Jobs, job(jobs.OpApply, 2, jobs.OutcomeBlocked, 10, jobs.AnnotationInputsHash, "h1:new"))
		}, jobs.OpApply, InputsChanged, nil},
		{"guard: an approved destructive plan is allowed by its inputs hash", func(in *Input) {
			in.Guarded, in.CurrentInputsHash, in.ApprovedDestructive = true, "h1:new", "h1:new"
			in.Jobs = append(in.Jobs, job(jobs.OpApply, 2, jobs.OutcomeBlocked, 10, jobs.AnnotationInputsHash, "h1:new"))
		}, jobs.OpApply, InputsChanged, func(t *testing.T, d Decision) {
			if !d.Guard || d.AllowDeletesHash != "h1:new" {
				t.Errorf("decision %+v", d)
			}
		}},
		{"guard: an approval of other inputs allows nothing", func(in *Input) {
			in.Guarded, in.CurrentInputsHash, in.ApprovedDestructive = true, "h1:new", "h1:old"
		}, jobs.OpApply, InputsChanged, func(t *testing.T, d Decision) {
			if d.AllowDeletesHash != "" {
				t.Errorf("decision %+v", d)
			}
		}},
		{"remediation: drift found with Remediate applies with the remediation tick", func(in *Input) {
			in.Drift = infrav1.DriftSpec{IntervalSeconds: in.Drift.IntervalSeconds, Action: infrav1.DriftActionRemediate}
			in.Jobs = append(in.Jobs, driftJob(1, 100, true))
			in.LastDriftCheck = at(105)
		}, jobs.OpApply, DriftRemediation, func(t *testing.T, d Decision) {
			if !d.Names.DriftRemediation || !d.Names.LastDriftCheck.Equal(at(105)) {
				t.Errorf("names %+v", d.Names)
			}
		}},
		{"remediation: Report only reports", func(in *Input) {
			in.Jobs = append(in.Jobs, driftJob(1, 100, true))
		}, "", UpToDate, nil},
		{"remediation: no drift, no remediation", func(in *Input) {
			in.Drift.Action = infrav1.DriftActionRemediate
			in.Jobs = append(in.Jobs, driftJob(1, 100, false))
		}, "", UpToDate, nil},
		{"remediation: an apply after the check resolved the drift", func(in *Input) {
			in.Drift.Action = infrav1.DriftActionRemediate
			in.Jobs = append(in.Jobs, driftJob(1, 100, true), job(jobs.OpApply, 2, jobs.OutcomeSucceeded, 200))
		}, "", UpToDate, nil},
		{"remediation: stops at the cap until the next good drift check", func(in *Input) {
			in.Drift.Action = infrav1.DriftActionRemediate
			in.Jobs = append(in.Jobs, driftJob(1, 100, true))
			in.LastDriftCheck = at(105)
			for i := int32(0); i < 3; i++ {
				in.Jobs = append(in.Jobs, job(jobs.OpApply, 2+i, jobs.OutcomeFailed, 200+10*int(i), jobs.AnnotationDriftRemediation, "true"))
			}
		}, "", UpToDate, nil},
		{"remediation: resumes after a newer good drift check", func(in *Input) {
			in.Drift.Action = infrav1.DriftActionRemediate
			for i := int32(0); i < 3; i++ {
				in.Jobs = append(in.Jobs, job(jobs.OpApply, 2+i, jobs.OutcomeFailed, 200+10*int(i), jobs.AnnotationDriftRemediation, "true"))
			}
			in.Jobs = append(in.Jobs, driftJob(2, 300, true))
			in.LastDriftCheck = at(305)
		}, jobs.OpApply, DriftRemediation, nil},
		{"restore: a requested backup is restored first", func(in *Input) {
			in.CurrentInputsHash = "h1:new"
			in.Restore = &Restore{Serial: "4", BackupName: "captf-state-backup-x-4", InputsHash: "h1:backup"}
		}, jobs.OpRestore, RestoreRequested, func(t *testing.T, d Decision) {
			if d.RestoreSerial != "4" || d.Names.BackupName != "captf-state-backup-x-4" || d.Names.BackupInputsHash != "h1:backup" {
				t.Errorf("decision %+v", d)
			}
		}},
		{"restore: a failed restore of a serial is not retried", func(in *Input) {
			in.Restore = &Restore{Serial: "4"}
			in.Jobs = append(in.Jobs, job(jobs.OpRestore, 1, jobs.OutcomeFailed, 900, jobs.AnnotationRestoreSerial, "4"))
		}, "", UpToDate, nil},
		{"restore: no restore while deleting with readable state", func(in *Input) {
			in.Deleting, in.Restore = true, &Restore{Serial: "4"}
		}, jobs.OpDestroy, Deleting, nil},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			in := base()
			tc.change(&in)
			d := Decide(in)
			if d.Op != tc.wantOp || d.Reason != tc.wantReason {
				t.Fatalf("Decide = op %q reason %q, want op %q reason %q (%+v)", d.Op, d.Reason, tc.wantOp, tc.wantReason, d)
			}
			if tc.check != nil {
				tc.check(t, d)
			}
		})
	}
}

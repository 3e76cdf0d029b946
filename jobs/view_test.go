package jobs

import (
	"maps"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/captf/captf/apis/runs"
)

func TestViewRun(t *testing.T) {
	long := strings.Repeat("l", 70)
	failedResult := Summary{
		Outcome: OutcomeFailed,
		Error:   &ErrorSummary{Kind: ErrorKindStep, Step: "apply", Summary: "Error: boom"},
		Changes: &Changes{Add: 1},
		Drift:   &DriftSummary{Detected: true, Change: 2},
	}
	history := jobs(
		mkJob(OpApply, 1, succeeded),
		mkJob(OpApply, 2, failed),
		mkJob(OpApply, 3, interrupted),
		mkJob(OpApply, 4, deadline, withSummary(failedResult)),
		mkJob(OpRefresh, 1, running),
	)
	tests := []struct {
		name     string
		job      batchv1.Job
		retained []batchv1.Job
		limits   Limits
		now      time.Time
		check    func(t *testing.T, v RunView)
	}{
		{
			name: "a Job that has not started is Pending, with no start and no duration",
			job:  mkJob(OpApply, 1, pending), now: at(30),
			check: func(t *testing.T, v RunView) {
				if v.Phase != runs.RunPhasePending || v.StartTime != nil || v.Duration != 0 || v.CompletionTime != nil {
					t.Errorf("view %+v", v)
				}
			},
		},
		{
			name: "a running Job's duration runs to now",
			job:  history[4], retained: history, now: at(13),
			check: func(t *testing.T, v RunView) {
				if v.Phase != runs.RunPhaseRunning || v.Duration != 3*time.Minute || v.Retention != runs.RetentionRunning {
					t.Errorf("view %+v", v)
				}
			},
		},
		{
			name: "a finished Job's duration runs from start to finish, whatever now is",
			job:  history[0], retained: history, now: at(500),
			check: func(t *testing.T, v RunView) {
				if v.Phase != runs.RunPhaseSucceeded || v.Duration != 5*time.Minute || !v.CompletionTime.Time.Equal(at(15)) || !v.StartTime.Time.Equal(at(10)) {
					t.Errorf("view %+v", v)
				}
			},
		},
		{
			name: "the target comes from the controller owner reference, since a long name's label is hashed",
			job:  mkJob(OpApply, 1, running, ownedBy(KindMachinePool, long), label(LabelOwnerName, LabelValue(long))),
			check: func(t *testing.T, v RunView) {
				if v.Target != (runs.Target{APIVersion: TargetAPIVersion, Kind: string(KindMachinePool), Name: long}) {
					t.Errorf("target %+v", v.Target)
				}
			},
		},
		{
			name: "without an owner reference the target comes from the owner labels",
			job:  mkJob(OpApply, 1, running),
			check: func(t *testing.T, v RunView) {
				if v.Target != (runs.Target{APIVersion: TargetAPIVersion, Kind: string(KindCluster), Name: "web"}) {
					t.Errorf("target %+v", v.Target)
				}
			},
		},
		{
			name: "op, attempt, inputs hash, drift remediation and approved plan come from the Job's labels and annotations",
			job: mkJob(OpApply, 7, running,
				annotate(AnnotationInputsHash, "h1:i"), annotate(AnnotationDriftRemediation, "true"), annotate(AnnotationApprovedPlan, "p3:x")),
			check: func(t *testing.T, v RunView) {
				if v.Operation != OpApply || v.Attempt != 7 || v.InputsHash != "h1:i" || !v.DriftRemediation || v.ApprovedPlan != "p3:x" {
					t.Errorf("view %+v", v)
				}
			},
		},
		{
			name: "the newest counted failure carries the op's backoff window, active before retryAfter",
			job:  history[3], retained: history, now: at(46),
			check: func(t *testing.T, v RunView) {
				want := BackoffWindow{Failures: 2, Delay: 2 * time.Minute, RetryAfter: at(47)}
				if v.Backoff == nil || v.Backoff.Failures != want.Failures || v.Backoff.Delay != want.Delay || !v.Backoff.RetryAfter.Equal(want.RetryAfter) || !v.BackoffActive {
					t.Errorf("backoff %+v active %v, want %+v active", v.Backoff, v.BackoffActive, want)
				}
				if v.Phase != runs.RunPhaseDeadlineExceeded || !v.CountsTowardBackoff || v.RetryNumber != 2 {
					t.Errorf("view %+v", v)
				}
			},
		},
		{
			name: "the window is still shown once now passed retryAfter, but inactive",
			job:  history[3], retained: history, now: at(47),
			check: func(t *testing.T, v RunView) {
				if v.Backoff == nil || v.BackoffActive {
					t.Errorf("backoff %+v active %v", v.Backoff, v.BackoffActive)
				}
			},
		},
		{
			name: "an older failure of the streak carries no window",
			job:  history[1], retained: history, now: at(46),
			check: func(t *testing.T, v RunView) {
				if v.Backoff != nil || !v.CountsTowardBackoff || v.RetryNumber != 1 {
					t.Errorf("view %+v", v)
				}
			},
		},
		{
			name: "an interrupted Job counts toward nothing",
			job:  history[2], retained: history, now: at(46),
			check: func(t *testing.T, v RunView) {
				if v.Phase != runs.RunPhaseInterrupted || v.CountsTowardBackoff || v.Backoff != nil || v.RetryNumber != 2 {
					t.Errorf("view %+v", v)
				}
			},
		},
		{
			name: "the retention reason is the one pruning uses",
			job:  history[1], retained: history, limits: Limits{FailedJobsHistoryLimit: limit(1)},
			check: func(t *testing.T, v RunView) {
				if v.Retention != runs.RetentionBeyondLimit {
					t.Errorf("retention %s", v.Retention)
				}
			},
		},
		{
			name: "error, changes and drift come from the result summary",
			job:  history[3], retained: history,
			check: func(t *testing.T, v RunView) {
				if v.Error == nil || *v.Error != *failedResult.Error || v.Changes == nil || *v.Changes != *failedResult.Changes ||
					v.Drift == nil || v.Drift.Change != 2 || v.ResultUnreadable {
					t.Errorf("view %+v", v)
				}
			},
		},
		{
			name: "an unreadable result summary is flagged, and the rest of the view stands",
			job:  mkJob(OpApply, 1, failed, annotate(AnnotationResult, "{not json")),
			check: func(t *testing.T, v RunView) {
				if !v.ResultUnreadable || v.Error != nil || v.Phase != runs.RunPhaseFailed {
					t.Errorf("view %+v", v)
				}
			},
		},
		{
			name: "a Job missing from the retained list is viewed among them",
			job:  mkJob(OpApply, 5, failed), retained: history, now: at(56),
			check: func(t *testing.T, v RunView) {
				if v.RetryNumber != 3 || v.Backoff == nil || v.Backoff.Failures != 3 || v.Retention != runs.RetentionUnresolvedFailure {
					t.Errorf("view %+v backoff %+v", v, v.Backoff)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.check(t, ViewRun(tt.job, tt.retained, tt.limits, tt.now))
		})
	}
}

// TestViewRun_EveryOutcomeIsTheRunPhaseOfItsName checks the phase of a Job in every state: a
// view converts the Job's Outcome to a runs.RunPhase, which is right only while every Outcome is
// spelled as the phase of the same meaning.
func TestViewRun_EveryOutcomeIsTheRunPhaseOfItsName(t *testing.T) {
	tests := []struct {
		op   Op
		st   state
		want runs.RunPhase
	}{
		{OpApply, pending, runs.RunPhasePending},
		{OpApply, running, runs.RunPhaseRunning},
		{OpApply, succeeded, runs.RunPhaseSucceeded},
		{OpApply, failed, runs.RunPhaseFailed},
		{OpApply, deadline, runs.RunPhaseDeadlineExceeded},
		{OpApply, interrupted, runs.RunPhaseInterrupted},
		{OpApply, blocked, runs.RunPhaseBlocked},
		{OpApply, planChanged, runs.RunPhasePlanChanged},
		{OpPlan, planUnreadable, runs.RunPhasePlanUnreadable},
	}
	for _, tt := range tests {
		if got := ViewRun(mkJob(tt.op, 1, tt.st), nil, Limits{}, at(30)).Phase; got != tt.want {
			t.Errorf("%s %s: phase %q, want %q", tt.op, tt.st, got, tt.want)
		}
	}
}

const (
	planHash   = "p3:1111"
	inputsHash = "h1:inputs"
)

// planJob is a plan Job of attempt n that produced planHash.
func planJob(n int32, st state, opts ...func(*batchv1.Job)) batchv1.Job {
	opts = append([]func(*batchv1.Job){
		annotate(AnnotationInputsHash, inputsHash),
		withSummary(Summary{Outcome: OutcomeSucceeded, Plan: &PlanSummary{Hash: planHash, Add: 1, Destroy: 2, Resources: tiny(3), Destructive: true}}),
	}, opts...)
	return mkJob(OpPlan, n, st, opts...)
}

// currentPlan is an owner whose status.plan is the plan of planJob(1) and whose inputs did not
// change since.
func currentPlan() PlanOwner {
	return PlanOwner{
		Plan:              &CurrentPlan{InputsHash: inputsHash, PlanHash: planHash, Job: "plan-a1"},
		CurrentInputsHash: inputsHash,
	}
}

// blockedApply is an apply of attempt n with the given inputs hash, blocked before a
// destructive plan.
func blockedApply(n int32, hash string) batchv1.Job {
	return mkJob(OpApply, n, blocked, annotate(AnnotationInputsHash, hash),
		withSummary(Summary{Outcome: OutcomeBlocked, Plan: &PlanSummary{Destroy: 1, Resources: []ResourceChange{{Address: "a.b", Actions: []string{"delete"}}}}}))
}

// verifying is owner with a Verify that passes only the Job named verified: what a Job whose
// signature verifies stands for here.
func verifying(owner PlanOwner, verified string) PlanOwner {
	owner.Verify = func(job *batchv1.Job) bool { return job.Name == verified }
	return owner
}

func applyOf(n int32, st state, key, value string) batchv1.Job {
	return mkJob(OpApply, n, st, annotate(key, value))
}

func TestViewPlan(t *testing.T) {
	approvedAt := &metav1.Time{Time: at(3)}
	with := func(o PlanOwner, f func(*PlanOwner)) PlanOwner { f(&o); return o }
	tests := []struct {
		name      string
		job       batchv1.Job
		retained  []batchv1.Job
		owner     PlanOwner
		want      runs.PlanPhase
		wantNoPln bool
		check     func(t *testing.T, v PlanView)
	}{
		{name: "a running plan Job is Planning", job: mkJob(OpPlan, 1, running), owner: currentPlan(), want: runs.PlanPhasePlanning},
		{name: "a failed plan Job is Failed", job: planJob(1, failed), owner: currentPlan(), want: runs.PlanPhaseFailed},
		{name: "a plan that succeeded without a readable plan is Failed", job: mkJob(OpPlan, 1, planUnreadable), owner: currentPlan(), want: runs.PlanPhaseFailed},
		{
			name: "the object's current plan, not approved, awaits approval of its plan hash",
			job:  planJob(1, succeeded), owner: currentPlan(), want: runs.PlanPhaseAwaitingApproval,
			check: func(t *testing.T, v PlanView) {
				if v.Source != runs.PlanSourcePlan || v.PlanHash != planHash || v.ApprovalHash != planHash || v.InputsHash != inputsHash ||
					v.Add != 1 || v.Destroy != 2 || len(v.Resources) != 3 || !v.Destructive || v.ApprovedBy != "" {
					t.Errorf("view %+v", v)
				}
			},
		},
		{
			name: "before its result is recorded, the hash comes from status.plan",
			job:  mkJob(OpPlan, 1, succeeded), owner: currentPlan(), want: runs.PlanPhaseAwaitingApproval,
			check: func(t *testing.T, v PlanView) {
				if v.PlanHash != planHash {
					t.Errorf("plan hash %q", v.PlanHash)
				}
			},
		},
		{name: "a succeeded plan with no hash recorded yet is still Planning", job: mkJob(OpPlan, 1, succeeded), want: runs.PlanPhasePlanning},
		{name: "a bookkept plan without a hash is Failed", job: mkJob(OpPlan, 1, succeeded, annotate(AnnotationBookkept, "true")), want: runs.PlanPhaseFailed},
		{name: "a plan whose result has no hash is Failed", job: mkJob(OpPlan, 1, succeeded, withSummary(Summary{Outcome: OutcomeSucceeded})), want: runs.PlanPhaseFailed},
		{
			name: "approve-plan equal to its hash makes it Approved, by whom and when",
			job:  planJob(1, succeeded), want: runs.PlanPhaseApproved,
			owner: with(currentPlan(), func(o *PlanOwner) { o.ApprovePlan, o.ApprovedBy, o.ApprovedAt = planHash, "alice", approvedAt }),
			check: func(t *testing.T, v PlanView) {
				if v.ApprovedBy != "alice" || v.ApprovedAt != approvedAt {
					t.Errorf("approved by %q at %v", v.ApprovedBy, v.ApprovedAt)
				}
			},
		},
		{
			name: "an approval of another hash leaves it awaiting approval, with no approver shown",
			job:  planJob(1, succeeded), want: runs.PlanPhaseAwaitingApproval,
			owner: with(currentPlan(), func(o *PlanOwner) { o.ApprovePlan, o.ApprovedBy = "p3:other", "alice" }),
			check: func(t *testing.T, v PlanView) {
				if v.ApprovedBy != "" {
					t.Errorf("approved by %q", v.ApprovedBy)
				}
			},
		},
		{
			name:  "the empty plan needs no approval",
			job:   mkJob(OpPlan, 1, succeeded, withSummary(Summary{Plan: &PlanSummary{Hash: EmptyPlanHash}})),
			owner: PlanOwner{Plan: &CurrentPlan{PlanHash: EmptyPlanHash, Job: "plan-a1"}}, want: runs.PlanPhaseApproved,
		},
		{
			name: "an apply created after the plan with approved-plan equal to its hash succeeded: Applied",
			job:  planJob(1, succeeded), retained: jobs(applyOf(5, succeeded, AnnotationApprovedPlan, planHash)),
			owner: PlanOwner{CurrentInputsHash: inputsHash}, want: runs.PlanPhaseApplied,
		},
		{
			name: "an applied plan, its approval consumed, names the approver the apply Job kept",
			job:  planJob(1, succeeded),
			retained: jobs(mkJob(OpApply, 5, succeeded, annotate(AnnotationApprovedPlan, planHash),
				annotate(AnnotationApprovedBy, "alice"), annotate(AnnotationApprovedAt, "2026-10-01T12:03:00Z"))),
			owner: PlanOwner{CurrentInputsHash: inputsHash}, want: runs.PlanPhaseApplied,
			check: func(t *testing.T, v PlanView) {
				if v.ApprovedBy != "alice" || v.ApprovedAt == nil || !v.ApprovedAt.Time.Equal(at(3)) {
					t.Errorf("approved by %q at %v", v.ApprovedBy, v.ApprovedAt)
				}
			},
		},
		{
			name: "an applied blocked apply names the approver of the apply of its inputs",
			job:  blockedApply(1, inputsHash),
			retained: jobs(mkJob(OpApply, 2, succeeded, annotate(AnnotationInputsHash, inputsHash),
				annotate(AnnotationApprovedBy, "bob"), annotate(AnnotationApprovedAt, "garbage"))),
			want: runs.PlanPhaseApplied,
			check: func(t *testing.T, v PlanView) {
				if v.ApprovedBy != "bob" || v.ApprovedAt != nil {
					t.Errorf("approved by %q at %v", v.ApprovedBy, v.ApprovedAt)
				}
			},
		},
		{
			name: "an apply of the same hash created before the plan did not apply it",
			job:  planJob(2, succeeded), retained: jobs(applyOf(1, succeeded, AnnotationApprovedPlan, planHash)),
			owner: PlanOwner{}, want: runs.PlanPhaseSuperseded,
		},
		{
			name: "an apply of another plan does not apply it",
			job:  planJob(1, succeeded), retained: jobs(applyOf(5, succeeded, AnnotationApprovedPlan, "p3:other")),
			owner: currentPlan(), want: runs.PlanPhaseAwaitingApproval,
		},
		{
			name: "the approved apply reported plan-changed: Changed",
			job:  planJob(1, succeeded), retained: jobs(applyOf(5, planChanged, AnnotationApprovedPlan, planHash)),
			owner: PlanOwner{Plan: &CurrentPlan{PlanHash: "p3:new", Job: "apply-a5"}}, want: runs.PlanPhaseChanged,
		},
		{
			name: "a failed approved apply leaves the plan Approved, since it retries the same plan",
			job:  planJob(1, succeeded), retained: jobs(applyOf(5, failed, AnnotationApprovedPlan, planHash)),
			owner: with(currentPlan(), func(o *PlanOwner) { o.ApprovePlan = planHash }), want: runs.PlanPhaseApproved,
		},
		{name: "a plan that is not status.plan is Superseded", job: planJob(1, succeeded), owner: PlanOwner{}, want: runs.PlanPhaseSuperseded},
		{
			name:  "status.plan made from inputs that are no longer current is Superseded",
			job:   planJob(1, succeeded),
			owner: with(currentPlan(), func(o *PlanOwner) { o.CurrentInputsHash = "h1:newer" }), want: runs.PlanPhaseSuperseded,
		},
		{
			name:  "status.plan naming another Job supersedes this one",
			job:   planJob(1, succeeded),
			owner: with(currentPlan(), func(o *PlanOwner) { o.Plan.Job = "plan-a2" }), want: runs.PlanPhaseSuperseded,
		},
		{
			name:  "with the current inputs unknown, status.plan alone decides",
			job:   planJob(1, succeeded),
			owner: with(currentPlan(), func(o *PlanOwner) { o.CurrentInputsHash = "" }), want: runs.PlanPhaseAwaitingApproval,
		},
		{
			name: "a plan-changed apply carries the new plan, awaiting approval while it is status.plan",
			job: mkJob(OpApply, 5, planChanged, annotate(AnnotationApprovedPlan, planHash),
				withSummary(Summary{Outcome: OutcomePlanChanged, Plan: &PlanSummary{Hash: "p3:new", Change: 1}})),
			owner: PlanOwner{Plan: &CurrentPlan{PlanHash: "p3:new", Job: "apply-a5"}}, want: runs.PlanPhaseAwaitingApproval,
			check: func(t *testing.T, v PlanView) {
				if v.Source != runs.PlanSourceChangedApply || v.ApprovalHash != "p3:new" || v.Change != 1 {
					t.Errorf("view %+v", v)
				}
			},
		},
		{
			name: "a plan-changed apply's new plan is Applied by a later apply of it",
			job: mkJob(OpApply, 5, planChanged,
				withSummary(Summary{Outcome: OutcomePlanChanged, Plan: &PlanSummary{Hash: "p3:new"}})),
			retained: jobs(applyOf(6, succeeded, AnnotationApprovedPlan, "p3:new")), want: runs.PlanPhaseApplied,
		},
		{
			name: "a plan-changed apply without a new plan is Failed",
			job:  mkJob(OpApply, 5, planChanged), want: runs.PlanPhaseFailed,
		},
		{
			name: "a blocked apply awaits approve-destructive-plan=<inputs hash>",
			job:  blockedApply(1, inputsHash), owner: PlanOwner{CurrentInputsHash: inputsHash}, want: runs.PlanPhaseAwaitingApproval,
			check: func(t *testing.T, v PlanView) {
				if v.Source != runs.PlanSourceBlockedApply || v.ApprovalHash != inputsHash || v.PlanHash != "" || !v.Destructive ||
					v.Destroy != 1 || len(v.Resources) != 1 || v.Resources[0].Address != "a.b" {
					t.Errorf("view %+v", v)
				}
			},
		},
		{
			name: "approve-destructive-plan equal to its inputs hash makes a blocked apply Approved",
			job:  blockedApply(1, inputsHash), want: runs.PlanPhaseApproved,
			owner: PlanOwner{CurrentInputsHash: inputsHash, ApproveDestructivePlan: inputsHash, ApprovedBy: "bob"},
			check: func(t *testing.T, v PlanView) {
				if v.ApprovedBy != "bob" {
					t.Errorf("approved by %q", v.ApprovedBy)
				}
			},
		},
		{
			name: "an approve-plan annotation does not approve a blocked apply",
			job:  blockedApply(1, inputsHash), want: runs.PlanPhaseAwaitingApproval,
			owner: PlanOwner{ApprovePlan: inputsHash},
		},
		{
			name: "a newer apply of the same inputs that succeeded applied it",
			job:  blockedApply(1, inputsHash), retained: jobs(applyOf(2, succeeded, AnnotationInputsHash, inputsHash)),
			owner: PlanOwner{CurrentInputsHash: inputsHash}, want: runs.PlanPhaseApplied,
		},
		{
			name: "a newer approved apply of the same inputs that failed leaves it Approved",
			job:  blockedApply(1, inputsHash), retained: jobs(applyOf(2, failed, AnnotationInputsHash, inputsHash)),
			owner: PlanOwner{ApproveDestructivePlan: inputsHash}, want: runs.PlanPhaseApproved,
		},
		{
			name:  "a blocked apply of inputs that are no longer current is Superseded",
			job:   blockedApply(1, inputsHash),
			owner: PlanOwner{CurrentInputsHash: "h1:newer", ApproveDestructivePlan: inputsHash}, want: runs.PlanPhaseSuperseded,
		},
		{
			name: "a newer apply of other inputs supersedes a blocked apply",
			job:  blockedApply(1, inputsHash), retained: jobs(applyOf(2, succeeded, AnnotationInputsHash, "h1:newer")),
			want: runs.PlanPhaseSuperseded,
		},
		{
			name: "a newer blocked apply of the same inputs supersedes an older one",
			job:  blockedApply(1, inputsHash), retained: jobs(blockedApply(2, inputsHash)),
			want: runs.PlanPhaseSuperseded,
		},
		{
			name: "an older apply does not decide a blocked apply's phase",
			job:  blockedApply(2, inputsHash), retained: jobs(applyOf(1, succeeded, AnnotationInputsHash, "h1:older")),
			want: runs.PlanPhaseAwaitingApproval,
		},
		{name: "a succeeded apply carries no plan", job: mkJob(OpApply, 1, succeeded), wantNoPln: true},
		{name: "a failed apply carries no plan", job: mkJob(OpApply, 1, failed), wantNoPln: true},
		{name: "a drift check carries no plan", job: mkJob(OpDrift, 1, succeeded), wantNoPln: true},
		{
			name: "a plan awaiting approval whose Job does not verify is Unverified",
			job:  planJob(1, succeeded), owner: verifying(currentPlan(), "nothing"), want: runs.PlanPhaseUnverified,
		},
		{
			name: "an approved plan whose Job does not verify is Unverified",
			job:  planJob(1, succeeded), owner: verifying(with(currentPlan(), func(o *PlanOwner) { o.ApprovePlan = planHash }), "nothing"),
			want: runs.PlanPhaseUnverified,
		},
		{
			name: "an applied plan whose Job does not verify is Unverified",
			job:  planJob(1, succeeded), retained: jobs(applyOf(5, succeeded, AnnotationApprovedPlan, planHash)),
			owner: verifying(currentPlan(), "apply-a5"), want: runs.PlanPhaseUnverified,
		},
		{
			name: "a failed plan whose Job does not verify is Unverified",
			job:  planJob(1, failed), owner: verifying(currentPlan(), "nothing"), want: runs.PlanPhaseUnverified,
		},
		{
			name: "a blocked apply whose Job does not verify is Unverified",
			job:  blockedApply(1, inputsHash), owner: verifying(PlanOwner{CurrentInputsHash: inputsHash}, "nothing"), want: runs.PlanPhaseUnverified,
		},
		{
			name: "a plan-changed apply whose Job does not verify is Unverified",
			job: mkJob(OpApply, 5, planChanged, annotate(AnnotationApprovedPlan, planHash),
				withSummary(Summary{Outcome: OutcomePlanChanged, Plan: &PlanSummary{Hash: "p3:new", Add: 1}})),
			owner: verifying(PlanOwner{Plan: &CurrentPlan{PlanHash: "p3:new", Job: "apply-a5"}}, "nothing"), want: runs.PlanPhaseUnverified,
		},
		{
			name: "a plan whose Job verifies keeps its phase",
			job:  planJob(1, succeeded), owner: verifying(currentPlan(), "plan-a1"), want: runs.PlanPhaseAwaitingApproval,
		},
		{
			name: "only the plan's own Job is verified, not the other Jobs of the object",
			job:  planJob(1, succeeded), retained: jobs(applyOf(5, succeeded, AnnotationApprovedPlan, planHash)),
			owner: verifying(currentPlan(), "plan-a1"), want: runs.PlanPhaseApplied,
		},
		{
			name: "an unverified plan still shows what its Job says, to be read, not approved",
			job:  planJob(1, succeeded), owner: verifying(currentPlan(), "nothing"), want: runs.PlanPhaseUnverified,
			check: func(t *testing.T, v PlanView) {
				if v.PlanHash != planHash || v.ApprovalHash != planHash || v.Destroy != 2 || len(v.Resources) != 3 {
					t.Errorf("view %+v", v)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, ok := ViewPlan(tt.job, tt.retained, tt.owner)
			if ok == tt.wantNoPln {
				t.Fatalf("ViewPlan() ok = %v", ok)
			}
			if tt.wantNoPln {
				return
			}
			if v.Phase != tt.want {
				t.Errorf("phase = %s, want %s", v.Phase, tt.want)
			}
			if v.Target.Name != "web" {
				t.Errorf("target %+v", v.Target)
			}
			if tt.check != nil {
				tt.check(t, v)
			}
		})
	}
}

func TestPlanApprovalCheck(t *testing.T) {
	plan := planJob(1, succeeded)
	drift := mkJob(OpDrift, 1, succeeded)
	blockedJob := blockedApply(1, inputsHash)
	now := at(60)
	approvedAt := now.UTC().Format(time.RFC3339)
	tests := []struct {
		name     string
		job      *batchv1.Job
		retained []batchv1.Job
		owner    PlanOwner
		hash     string
		want     ApprovalVerdict
		wantMsg  string
		wantAnn  map[string]string
	}{
		{name: "an unknown plan is not found", job: nil, hash: planHash, want: ApprovalNotFound, wantMsg: "not found"},
		{name: "a Job that carries no plan is not found", job: &drift, hash: planHash, want: ApprovalNotFound, wantMsg: "carries no plan"},
		{
			name: "the current plan quoted by its hash is approved with approve-plan, approved-by and approved-at",
			job:  &plan, owner: currentPlan(), hash: planHash, want: ApprovalAllowed,
			wantAnn: map[string]string{AnnotationApprovePlan: planHash, AnnotationApprovedBy: "alice", AnnotationApprovedAt: approvedAt},
		},
		{
			name: "approving an approved plan again is allowed",
			job:  &plan, owner: func() PlanOwner { o := currentPlan(); o.ApprovePlan = planHash; return o }(), hash: planHash, want: ApprovalAllowed,
			wantAnn: map[string]string{AnnotationApprovePlan: planHash, AnnotationApprovedBy: "alice", AnnotationApprovedAt: approvedAt},
		},
		{
			name: "a blocked apply quoted by its inputs hash is approved with approve-destructive-plan",
			job:  &blockedJob, owner: PlanOwner{CurrentInputsHash: inputsHash}, hash: inputsHash, want: ApprovalAllowed,
			wantAnn: map[string]string{AnnotationApproveDestructivePlan: inputsHash, AnnotationApprovedBy: "alice", AnnotationApprovedAt: approvedAt},
		},
		{name: "a hash that differs is a conflict", job: &plan, owner: currentPlan(), hash: "p3:other", want: ApprovalConflict, wantMsg: "has hash " + planHash + ", not p3:other"},
		{name: "a plan that is not the object's current one is a conflict", job: &plan, owner: PlanOwner{}, hash: planHash, want: ApprovalConflict, wantMsg: "is not the current plan of TerraformCluster web"},
		{name: "a plan still planning is a conflict", job: ptrTo(mkJob(OpPlan, 1, running)), hash: planHash, want: ApprovalConflict, wantMsg: "still planning"},
		{name: "a failed plan is a conflict", job: ptrTo(planJob(1, failed)), hash: planHash, want: ApprovalConflict, wantMsg: "failed"},
		{
			name: "an applied plan is a conflict", job: &plan, retained: jobs(applyOf(5, succeeded, AnnotationApprovedPlan, planHash)),
			hash: planHash, want: ApprovalConflict, wantMsg: "already applied",
		},
		{
			name: "a changed plan is a conflict that points to the new plan", job: &plan, retained: jobs(applyOf(5, planChanged, AnnotationApprovedPlan, planHash)),
			hash: planHash, want: ApprovalConflict, wantMsg: "approve the new plan",
		},
		{
			name: "a blocked apply without an inputs hash has nothing to approve", job: ptrTo(mkJob(OpApply, 1, blocked)),
			hash: "", want: ApprovalConflict, wantMsg: "no hash",
		},
		{
			name: "a plan whose Job does not verify is a conflict that says so and asks for a new plan",
			job:  &plan, owner: verifying(currentPlan(), "nothing"), hash: planHash, want: ApprovalConflict,
			wantMsg: "cannot be approved: the signature of Job plan-a1 does not verify, so someone other than the controller changed it; make a new plan (kubectl captf replan web)",
		},
		{
			name: "a plan already approved whose Job does not verify is a conflict",
			job:  &plan, owner: verifying(func() PlanOwner { o := currentPlan(); o.ApprovePlan = planHash; return o }(), "nothing"), hash: planHash,
			want: ApprovalConflict, wantMsg: "does not verify",
		},
		{
			name: "a blocked apply whose Job does not verify is a conflict",
			job:  &blockedJob, owner: verifying(PlanOwner{CurrentInputsHash: inputsHash}, "nothing"), hash: inputsHash,
			want: ApprovalConflict, wantMsg: "does not verify",
		},
		{
			name: "a plan whose Job verifies is approved",
			job:  &plan, owner: verifying(currentPlan(), "plan-a1"), hash: planHash, want: ApprovalAllowed,
			wantAnn: map[string]string{AnnotationApprovePlan: planHash, AnnotationApprovedBy: "alice", AnnotationApprovedAt: approvedAt},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PlanApprovalCheck(tt.job, tt.retained, tt.owner, tt.hash, "alice", now)
			if got.Verdict != tt.want {
				t.Fatalf("verdict = %s (%s), want %s", got.Verdict, got.Message, tt.want)
			}
			if !strings.Contains(got.Message, tt.wantMsg) {
				t.Errorf("message %q does not contain %q", got.Message, tt.wantMsg)
			}
			if !maps.Equal(got.Annotations, tt.wantAnn) {
				t.Errorf("annotations = %v, want %v", got.Annotations, tt.wantAnn)
			}
		})
	}
}

func ptrTo(j batchv1.Job) *batchv1.Job { return &j }

// TestHistoryAgreesWithTheRules checks, over pseudo-random histories, that the one-pass
// History gives every Job the values the rules define one Job at a time: the retry number is 1
// plus the failure streak of the op's older Jobs, the retention is Retentions', and only the
// op's newest counted failure carries the backoff window of the op's FailureStreak.
func TestHistoryAgreesWithTheRules(t *testing.T) {
	states := []state{pending, running, succeeded, failed, deadline, interrupted, blocked, planChanged, planUnreadable}
	ops := []Op{OpApply, OpPlan, OpRefresh, OpDrift}
	limits := Limits{SuccessfulJobsHistoryLimit: limit(2), FailedJobsHistoryLimit: limit(3)}
	seed := uint32(1)
	next := func(n int) int { seed = seed*1664525 + 1013904223; return int(seed>>8) % n }
	for round := 0; round < 300; round++ {
		var history []batchv1.Job
		attempts := map[Op]int32{}
		for n := next(12); n > 0; n-- {
			op := ops[next(len(ops))]
			attempts[op]++
			history = append(history, mkJob(op, attempts[op], states[next(len(states))]))
		}
		h := NewHistory(history, limits)
		retentions := Retentions(history, limits)
		for i := range history {
			job := &history[i]
			v := h.ViewRun(i, at(100))
			var older []*batchv1.Job
			for _, j := range OpJobs(history, OpOf(job)) {
				if newer(job, j) {
					older = append(older, j)
				}
			}
			if want := 1 + len(streak(older)); v.RetryNumber != want {
				t.Fatalf("round %d, %s: retry number %d, want %d", round, job.Name, v.RetryNumber, want)
			}
			if v.Retention != retentions[job.Name] {
				t.Fatalf("round %d, %s: retention %s, want %s", round, job.Name, v.Retention, retentions[job.Name])
			}
			failures := FailureStreak(history, OpOf(job))
			newestFailure := len(failures) > 0 && failures[0].Name == job.Name
			if (v.Backoff != nil) != newestFailure || (newestFailure && *v.Backoff != backoffWindow(failures, limits)) {
				t.Fatalf("round %d, %s: backoff %+v, newest counted failure %v", round, job.Name, v.Backoff, newestFailure)
			}
			if got := RetryNumber(job, history); got != v.RetryNumber {
				t.Fatalf("round %d, %s: RetryNumber %d, History %d", round, job.Name, got, v.RetryNumber)
			}
		}
	}
}

// webUID is the UID of TerraformCluster web in the tests of the rule that only the
// controller's own Jobs count.
const webUID types.UID = "uid-web"

// controlledBy gives a Job the controller owner reference the controller sets: to
// TerraformCluster web with uid.
func controlledBy(uid types.UID) func(*batchv1.Job) {
	return func(j *batchv1.Job) {
		ownedBy(KindCluster, "web")(j)
		j.OwnerReferences[0].UID = uid
	}
}

// forgedAttempt makes a Job claim the attempt 2147483647, the largest an attempt label holds.
func forgedAttempt(j *batchv1.Job) {
	j.Name = string(OpOf(j)) + "-a2147483647"
	j.Labels[LabelAttempt] = strconv.FormatInt(math.MaxInt32, 10)
}

func TestOnlyTheControllersOwnJobsCount_ControllerOf(t *testing.T) {
	ref := func(apiVersion, kind string, controller bool) func(*batchv1.Job) {
		return func(j *batchv1.Job) {
			j.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "web", UID: webUID, Controller: &controller}}
		}
	}
	tests := []struct {
		name string
		job  batchv1.Job
		ok   bool
	}{
		{name: "the controller's reference to the object is a run of it", job: mkJob(OpApply, 1, running, controlledBy(webUID)), ok: true},
		{name: "a reference to another version of the group counts", job: mkJob(OpApply, 1, running, ref(TargetGroup+"/v1beta1", string(KindCluster), true)), ok: true},
		{name: "the captf labels alone make no run", job: mkJob(OpApply, 1, running)},
		{name: "a kind that runs Jobs in another group makes no run", job: mkJob(OpApply, 1, running, ref("evil.example.com/v1", string(KindCluster), true))},
		{name: "a core-style apiVersion makes no run", job: mkJob(OpApply, 1, running, ref("v1", string(KindCluster), true))},
		{name: "another kind of the infrastructure group makes no run", job: mkJob(OpApply, 1, running, ref(TargetAPIVersion, "AWSCluster", true))},
		{name: "an owner reference that is not the controller's makes no run", job: mkJob(OpApply, 1, running, ref(TargetAPIVersion, string(KindCluster), false))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target, uid, ok := ControllerOf(&tt.job)
			if ok != tt.ok {
				t.Fatalf("ControllerOf = %+v, %s, %v; want ok %v", target, uid, ok, tt.ok)
			}
			if IsRunOf(&tt.job, webUID) != tt.ok {
				t.Errorf("IsRunOf(%s) = %v, want %v", webUID, !tt.ok, tt.ok)
			}
			if why := WhyNotRunOf(&tt.job, ""); (why == "") != tt.ok || (!tt.ok && !strings.Contains(why, "has no controller owner reference")) {
				t.Errorf("WhyNotRunOf = %q", why)
			}
			if tt.ok && (target.Kind != string(KindCluster) || target.Name != "web" || uid != webUID || TargetOf(&tt.job) != target) {
				t.Errorf("ControllerOf = %+v, %s; TargetOf = %+v", target, uid, TargetOf(&tt.job))
			}
		})
	}
	if IsRunOf(ptrTo(mkJob(OpApply, 1, running, controlledBy("uid-earlier-web"))), webUID) {
		t.Error("a Job of an earlier object of the same name counts as a run of the current one")
	}
}

func TestOnlyTheControllersOwnJobsCount_RunsOf(t *testing.T) {
	own := jobs(mkJob(OpApply, 1, succeeded, controlledBy(webUID)), mkJob(OpApply, 2, failed, controlledBy(webUID)))
	if got := RunsOf(own, webUID); &got[0] != &own[0] || len(got) != len(own) {
		t.Errorf("RunsOf copied a history that is all the object's: %v", got)
	}
	mixed := jobs(own[0], mkJob(OpApply, 3, failed), own[1], mkJob(OpApply, 4, failed, controlledBy("uid-other")))
	got := RunsOf(mixed, webUID)
	if len(got) != 2 || got[0].Name != own[0].Name || got[1].Name != own[1].Name {
		t.Errorf("RunsOf = %v, want %s and %s", got, own[0].Name, own[1].Name)
	}
	if mixed[1].Name != "apply-a3" {
		t.Error("RunsOf changed its argument")
	}
}

// TestOnlyTheControllersOwnJobsCount_AForgedAttemptDoesNotWedgeTheViews: Jobs with copied
// labels and the largest attempt a label holds would be the newest of their op; left out of the
// object's history, they change no retry number, retention, backoff window or plan phase, and
// their plans cannot be approved.
func TestOnlyTheControllersOwnJobsCount_AForgedAttemptDoesNotWedgeTheViews(t *testing.T) {
	own := jobs(
		mkJob(OpApply, 1, succeeded, controlledBy(webUID)),
		mkJob(OpApply, 2, failed, controlledBy(webUID)),
		blockedApply(3, inputsHash),
		planJob(1, succeeded, controlledBy(webUID)),
	)
	controlledBy(webUID)(&own[2])
	forged := jobs(
		// Would make the blocked apply Applied and the plan Applied.
		mkJob(OpApply, 4, succeeded, forgedAttempt, annotate(AnnotationInputsHash, inputsHash), annotate(AnnotationApprovedPlan, planHash)),
		// Would supersede the blocked apply, and reset the failure streak of the plans.
		mkJob(OpPlan, 4, failed, forgedAttempt),
		// A reference to a made-up or earlier object of the same name is no run of this one.
		mkJob(OpApply, 5, blocked, controlledBy("uid-earlier-web"), annotate(AnnotationInputsHash, "h1:other")),
	)
	forged[2].Name = "apply-a5-earlier"
	all := append(append([]batchv1.Job(nil), own...), forged...)
	owner := currentPlan()
	owner.UID = webUID
	now := at(100)

	if got := RunsOf(all, webUID); len(got) != len(own) {
		t.Fatalf("RunsOf kept %d Jobs, want the object's %d", len(got), len(own))
	}
	want, got := NewHistory(own, Limits{}), NewHistory(RunsOf(all, webUID), Limits{})
	for i := range own {
		if w, g := want.ViewRun(i, now), got.ViewRun(got.Index(own[i].Name), now); w.RetryNumber != g.RetryNumber || w.Retention != g.Retention || (w.Backoff == nil) != (g.Backoff == nil) {
			t.Errorf("%s: view %+v among forged Jobs, want %+v", own[i].Name, g, w)
		}
	}

	for _, job := range []batchv1.Job{own[2], own[3]} {
		v, ok := ViewPlan(job, all, owner)
		if !ok || v.Phase != runs.PlanPhaseAwaitingApproval {
			t.Errorf("plan of %s among forged Jobs: %v %s, want AwaitingApproval", job.Name, ok, v.Phase)
		}
		hash := v.ApprovalHash
		if d := PlanApprovalCheck(&job, all, owner, hash, "alice", now); d.Verdict != ApprovalAllowed {
			t.Errorf("approval of %s among forged Jobs: %s (%s)", job.Name, d.Verdict, d.Message)
		}
	}

	for _, tt := range []struct {
		job     batchv1.Job
		wantMsg string
	}{
		{forged[1], "has no controller owner reference"},
		{forged[2], "was made for a TerraformCluster web with UID uid-earlier-web, not for the current one (UID uid-web)"},
	} {
		if _, ok := ViewPlan(tt.job, all, owner); ok {
			t.Errorf("%s: a Job that is no run of the object shows a plan of it", tt.job.Name)
		}
		d := PlanApprovalCheck(&tt.job, all, owner, inputsHash, "alice", now)
		if d.Verdict != ApprovalNotFound || !strings.Contains(d.Message, tt.wantMsg) || d.Annotations != nil {
			t.Errorf("approval of %s: %s %q %v, want NotFound with %q", tt.job.Name, d.Verdict, d.Message, d.Annotations, tt.wantMsg)
		}
	}

	// Viewed alone, as what it is, the forged Job shows its attempt as the label's bound reads
	// it, and nothing overflows.
	for _, job := range forged[:2] {
		v := ViewRun(job, nil, Limits{}, now)
		if v.Attempt != AttemptOf(&job) || v.RetryNumber != 1 || v.Retention == "" {
			t.Errorf("%s alone: attempt %d (AttemptOf %d), retry %d, retention %q", job.Name, v.Attempt, AttemptOf(&job), v.RetryNumber, v.Retention)
		}
	}
	beyond := mkJob(OpApply, 6, failed, label(LabelAttempt, "2147483648"))
	if v := ViewRun(beyond, nil, Limits{}, now); v.Attempt != 0 || v.RetryNumber != 1 {
		t.Errorf("an attempt past the label's bound: attempt %d, retry %d", v.Attempt, v.RetryNumber)
	}
}

package decide

import (
	"errors"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/jobstest"
)

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func at(minutes int) time.Time { return t0.Add(time.Duration(minutes) * time.Minute) }

// job builds a Job of the cluster "web" created at the given minute.
func job(op jobs.Op, attempt int32, outcome jobs.Outcome, createdMinute int, annotations ...string) batchv1.Job {
	b := jobstest.Builder{Kind: jobs.KindCluster, Name: "web", Op: op, Attempt: attempt, Outcome: outcome, Created: at(createdMinute), Annotations: map[string]string{}}
	for i := 0; i+1 < len(annotations); i += 2 {
		b.Annotations[annotations[i]] = annotations[i+1]
	}
	return b.Job()
}

var applied = state.State{Exists: true, InputsHash: "h1:old", Resources: 2}

// base is a provisioned, converged cluster with drift checks off, at minute 1000.
func base() Input {
	return Input{
		Kind: jobs.KindCluster, UID: "uid-1", CreatedAt: t0, Mutable: true,
		State: applied, CurrentInputsHash: "h1:old",
		Jobs:  []batchv1.Job{job(jobs.OpApply, 1, jobs.OutcomeSucceeded, 0)},
		Drift: infrav1.DriftSpec{IntervalSeconds: ptr.To[int64](0)},
		Now:   at(1000),
	}
}

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		rule       string
		change     func(*Input)
		wantOp     jobs.Op
		wantReason string
		wantDrop   bool
		wantAfter  time.Duration
	}{
		{"0: an active Job is waited for", func(in *Input) {
			in.Jobs = append(in.Jobs, job(jobs.OpDrift, 1, jobs.OutcomeRunning, 999))
			in.CurrentInputsHash = "h1:new"
		}, "", JobActive, false, JobActiveRequeue},
		{"2: deleting with unreadable state holds the deletion", func(in *Input) {
			in.Deleting, in.StateErr = true, state.ErrCorrupt
		}, "", DeletionHeld, false, StateRequeue},
		{"3: deleting without state drops the finalizer", func(in *Input) {
			in.Deleting, in.State = true, state.State{}
		}, "", DeletingWithoutState, true, 0},
		{"3: deleting with a destroyed (empty) state drops the finalizer", func(in *Input) {
			in.Deleting, in.State = true, state.State{Exists: true, InputsHash: "h1:old"}
		}, "", DeletingWithoutState, true, 0},
		{"4: deleting with state destroys", func(in *Input) { in.Deleting = true }, jobs.OpDestroy, Deleting, false, 0},
		{"4: deleting destroys even when the inputs changed", func(in *Input) {
			in.Deleting, in.CurrentInputsHash = true, "h1:new"
		}, jobs.OpDestroy, Deleting, false, 0},
		{"deleting with the infrastructure abandoned drops the finalizer without a destroy", func(in *Input) {
			in.Deleting, in.Abandoned = true, true
		}, "", Abandoned, true, 0},
		{"an abandoned deletion is let go even when the state cannot be read", func(in *Input) {
			in.Deleting, in.Abandoned, in.State, in.StateErr = true, true, state.State{}, state.ErrLost
		}, "", Abandoned, true, 0},
		{"an abandoned deletion still waits for a running Job", func(in *Input) {
			in.Deleting, in.Abandoned = true, true
			in.Jobs = append(in.Jobs, job(jobs.OpDestroy, 1, jobs.OutcomeRunning, 999))
		}, "", JobActive, false, JobActiveRequeue},
		{"a deleted cluster waits for its machines and pools before it destroys", func(in *Input) {
			in.Deleting, in.Dependents = true, 2
		}, "", WaitingForDependents, false, DependentsRequeue},
		{"a deleted cluster without state still waits for its dependents", func(in *Input) {
			in.Deleting, in.Dependents, in.State = true, 1, state.State{}
		}, "", WaitingForDependents, false, DependentsRequeue},
		{"an object Cluster API has not made ready starts nothing", func(in *Input) {
			in.Dependencies, in.State, in.Jobs = "WaitingForBootstrapData", state.State{}, nil
		}, "", DependenciesNotReady, false, DependenciesRequeue},
		{"an object Cluster API has not made ready runs no drift check either", func(in *Input) {
			in.Dependencies, in.Now = "OwnerMismatch", in.Now.Add(48*time.Hour)
		}, "", DependenciesNotReady, false, DependenciesRequeue},
		{"a deletion goes ahead without what Cluster API provides", func(in *Input) {
			in.Deleting, in.Dependencies = true, "OwnerNotFound"
		}, jobs.OpDestroy, Deleting, false, 0},
		{"an object whose identity lends it no credentials starts nothing", func(in *Input) {
			in.IdentityNotAllowed, in.CurrentInputsHash = "NamespaceNotAllowed", "h1:new"
		}, "", IdentityNotAllowed, false, DependenciesRequeue},
		{"without credentials even a destroy waits", func(in *Input) {
			in.Deleting, in.IdentityNotAllowed = true, "NamespaceNotAllowed"
		}, "", IdentityNotAllowed, false, DependenciesRequeue},
		{"a deletion without state needs no credentials", func(in *Input) {
			in.Deleting, in.IdentityNotAllowed, in.State = true, "IdentityNotFound", state.State{}
		}, "", DeletingWithoutState, true, 0},
		{"an abandoned deletion needs no credentials", func(in *Input) {
			in.Deleting, in.IdentityNotAllowed, in.Abandoned = true, "NamespaceNotAllowed", true
		}, "", Abandoned, true, 0},
		{"a lost state (missing after an apply once succeeded) applies nothing", func(in *Input) {
			in.State, in.StateErr = state.State{}, state.ErrLost
		}, "", StateLost, false, StateRequeue},
		{"2: deleting with a lost state holds the deletion", func(in *Input) {
			in.Deleting, in.State, in.StateErr = true, state.State{}, state.ErrLost
		}, "", DeletionHeld, false, StateRequeue},
		{"1: a lost state may be restored", func(in *Input) {
			in.State, in.StateErr = state.State{}, state.ErrLost
			in.Restore = &Restore{Serial: "3", BackupName: "b", InputsHash: "h1:old"}
		}, jobs.OpRestore, RestoreRequested, false, 0},
		{"unreadable state starts nothing", func(in *Input) { in.StateErr = errors.New("x") }, "", StateUnreadable, false, StateRequeue},
		{"5: no state applies", func(in *Input) { in.State = state.State{}; in.Jobs = nil }, jobs.OpApply, NoState, false, 0},
		{"5: no state applies a machine too", func(in *Input) {
			in.Kind, in.Mutable, in.State, in.Jobs = jobs.KindMachine, false, state.State{}, nil
		}, jobs.OpApply, NoState, false, 0},
		{"6: a state without inputs hash applies", func(in *Input) { in.State.InputsHash = "" }, jobs.OpApply, StateWithoutInputsHash, false, 0},
		{"7: changed inputs apply", func(in *Input) { in.CurrentInputsHash = "h1:new" }, jobs.OpApply, InputsChanged, false, 0},
		{"7: a machine's changed inputs do not apply", func(in *Input) {
			in.Kind, in.Mutable, in.CurrentInputsHash = jobs.KindMachine, false, "h1:new"
			in.Jobs = append(in.Jobs, job(jobs.OpRefresh, 1, jobs.OutcomeSucceeded, 10))
			in.LastRefresh = at(15)
		}, "", UpToDate, false, 0},
		{"apply due without renderable inputs waits", func(in *Input) {
			in.State, in.CurrentInputsHash, in.Jobs = state.State{}, "", nil
		}, "", InputsUnavailable, false, InputsRequeue},
		{"8: the newest apply failed: apply again", func(in *Input) {
			in.Jobs = append(in.Jobs, job(jobs.OpApply, 2, jobs.OutcomeFailed, 10))
		}, jobs.OpApply, LastApplyFailed, false, 0},
		{"8: a deadline counts as a failed apply", func(in *Input) {
			in.Jobs = append(in.Jobs, job(jobs.OpApply, 2, jobs.OutcomeDeadlineExceeded, 10))
		}, jobs.OpApply, LastApplyFailed, false, 0},
		{"8: an interrupted apply is retried at once", func(in *Input) {
			in.Jobs = append(in.Jobs, job(jobs.OpApply, 2, jobs.OutcomeInterrupted, 999))
		}, jobs.OpApply, LastApplyFailed, false, 0},
		{"8: a blocked retry of a failed apply keeps the apply due and waits for approval", func(in *Input) {
			in.Guarded = true
			in.Jobs = append(in.Jobs, job(jobs.OpApply, 2, jobs.OutcomeFailed, 10, jobs.AnnotationInputsHash, "h1:y"),
				job(jobs.OpApply, 3, jobs.OutcomeBlocked, 20, jobs.AnnotationInputsHash, "h1:old", jobs.AnnotationAfterFailedApply, "true"))
		}, "", DestructivePlanBlocked, false, ApprovalRequeue},
		{"8: an approved blocked retry of a failed apply applies", func(in *Input) {
			in.Guarded, in.ApprovedDestructive = true, "h1:old"
			in.Jobs = append(in.Jobs, job(jobs.OpApply, 2, jobs.OutcomeFailed, 10, jobs.AnnotationInputsHash, "h1:y"),
				job(jobs.OpApply, 3, jobs.OutcomeBlocked, 20, jobs.AnnotationInputsHash, "h1:old", jobs.AnnotationAfterFailedApply, "true"))
		}, jobs.OpApply, LastApplyFailed, false, 0},
		{"8: a plan-changed retry of a failed apply keeps the apply due", func(in *Input) {
			in.Jobs = append(in.Jobs, job(jobs.OpApply, 2, jobs.OutcomeFailed, 10),
				job(jobs.OpApply, 3, jobs.OutcomePlanChanged, 20, jobs.AnnotationAfterFailedApply, "true"))
		}, jobs.OpApply, LastApplyFailed, false, 0},
		{"8: a blocked apply waits for a person, not a retry", func(in *Input) {
			in.Jobs = append(in.Jobs, job(jobs.OpApply, 2, jobs.OutcomeBlocked, 10))
		}, "", UpToDate, false, 0},
		{"8: a plan-changed apply waits for a person, not a retry", func(in *Input) {
			in.Jobs = append(in.Jobs, job(jobs.OpApply, 2, jobs.OutcomePlanChanged, 10))
		}, "", UpToDate, false, 0},
		{"8: a failed remediation apply is not LastApplyFailed", func(in *Input) {
			in.Jobs = append(in.Jobs, job(jobs.OpApply, 2, jobs.OutcomeFailed, 10, jobs.AnnotationDriftRemediation, "true"))
		}, "", UpToDate, false, 0},
		{"8: an interrupted apply recorded on the durable Secret applies again", func(in *Input) {
			in.InterruptedApply = "captf-c-web-apply-a2-abcdef"
		}, jobs.OpApply, LastApplyFailed, false, 0},
		{"8: a machine's failed apply is retried through its state, not rule 8", func(in *Input) {
			in.Kind, in.Mutable = jobs.KindMachine, false
			in.Jobs = append(in.Jobs, job(jobs.OpApply, 2, jobs.OutcomeFailed, 10), job(jobs.OpRefresh, 1, jobs.OutcomeSucceeded, 5))
			in.LastRefresh = at(10)
		}, "", UpToDate, false, 0},
		{"backoff turns a due apply into a requeue with the Backoff reason", func(in *Input) {
			in.CurrentInputsHash = "h1:new"
			in.Jobs = append(in.Jobs, job(jobs.OpApply, 2, jobs.OutcomeFailed, 995))
		}, "", InputsChanged + BackoffSuffix, false, 1 * time.Minute},
		{"a failing drift check never delays an apply", func(in *Input) {
			in.CurrentInputsHash = "h1:new"
			in.Jobs = append(in.Jobs, job(jobs.OpDrift, 1, jobs.OutcomeFailed, 995))
		}, jobs.OpApply, InputsChanged, false, 0},
		{"destroy backs off too", func(in *Input) {
			in.Deleting = true
			in.Jobs = append(in.Jobs, job(jobs.OpDestroy, 1, jobs.OutcomeFailed, 994), job(jobs.OpDestroy, 2, jobs.OutcomeFailed, 995))
		}, "", Deleting + BackoffSuffix, false, 2 * time.Minute},
		{"a machine refreshes once after each successful apply", func(in *Input) {
			in.Kind, in.Mutable = jobs.KindMachine, false
		}, jobs.OpRefresh, RefreshAfterApply, false, 0},
		{"a pool refreshes after an apply newer than its last refresh", func(in *Input) {
			in.Kind, in.LastRefresh = jobs.KindMachinePool, at(3)
		}, jobs.OpRefresh, RefreshAfterApply, false, 0},
		{"a cluster does not refresh after apply", func(in *Input) {}, "", UpToDate, false, 0},
		{"a pool refreshes its members one period after its last refresh", func(in *Input) {
			in.Kind, in.MembershipRefresh, in.LastRefresh = jobs.KindMachinePool, time.Minute, at(998)
		}, jobs.OpRefresh, MembershipRefresh, false, 0},
		{"a pool's membership refresh waits for its period", func(in *Input) {
			in.Kind, in.MembershipRefresh, in.LastRefresh = jobs.KindMachinePool, 5*time.Minute, at(998)
		}, "", UpToDate, false, 3 * time.Minute},
		{"a converging pool refreshes every 30 seconds", func(in *Input) {
			in.Kind, in.MembershipRefresh, in.MembershipConverging = jobs.KindMachinePool, 5*time.Minute, true
			in.LastRefresh = in.Now.Add(-10 * time.Second)
		}, "", UpToDate, false, 20 * time.Second},
		{"a pool's membership refresh comes before a later drift check", func(in *Input) {
			in.Kind, in.MembershipRefresh, in.LastRefresh = jobs.KindMachinePool, time.Minute, in.Now.Add(-30*time.Second)
			in.Drift.IntervalSeconds, in.LastDriftCheck = ptr.To[int64](3600), at(990)
		}, "", UpToDate, false, 30 * time.Second},
		{"a failing membership refresh backs off", func(in *Input) {
			in.Kind, in.MembershipRefresh, in.LastRefresh = jobs.KindMachinePool, time.Minute, at(990)
			in.Jobs = append(in.Jobs, job(jobs.OpRefresh, 1, jobs.OutcomeFailed, 995))
		}, "", MembershipRefresh + BackoffSuffix, false, time.Minute},
		{"a machine that may ask for its replacement reads its health one interval after its last refresh", func(in *Input) {
			in.Kind, in.Mutable, in.HealthCheck, in.LastRefresh = jobs.KindMachine, false, time.Minute, at(998)
		}, jobs.OpRefresh, HealthCheckDue, false, 0},
		{"a machine's health check waits for its interval", func(in *Input) {
			in.Kind, in.Mutable, in.HealthCheck, in.LastRefresh = jobs.KindMachine, false, 5*time.Minute, at(998)
		}, "", UpToDate, false, 3 * time.Minute},
		{"a machine that may not ask for its replacement reads no health on a schedule", func(in *Input) {
			in.Kind, in.Mutable, in.LastRefresh = jobs.KindMachine, false, at(998)
		}, "", UpToDate, false, 0},
		{"drift is due one interval after the last drift check", func(in *Input) {
			in.Drift.IntervalSeconds = ptr.To[int64](600)
			in.LastDriftCheck = at(900)
		}, jobs.OpDrift, DriftDue, false, 0},
		{"the first drift check is one interval after the last successful apply", func(in *Input) {
			in.Drift.IntervalSeconds = ptr.To[int64](600)
			in.Now = at(6)
		}, "", UpToDate, false, 9*time.Minute + Jitter("uid-1", 10*time.Minute)},
		{"without an apply the drift schedule starts at creation", func(in *Input) {
			in.Drift.IntervalSeconds = ptr.To[int64](600)
			in.Jobs = nil
			in.State.InputsHash = "h1:old"
			in.Now = at(1)
		}, "", UpToDate, false, 9*time.Minute + Jitter("uid-1", 10*time.Minute)},
		{"an unset drift interval is the 30-minute default", func(in *Input) {
			in.Drift.IntervalSeconds = nil
			in.Now = at(6)
		}, "", UpToDate, false, 29*time.Minute + Jitter("uid-1", 30*time.Minute)},
		{"a failing drift check backs off", func(in *Input) {
			in.Drift.IntervalSeconds = ptr.To[int64](60)
			in.Jobs = append(in.Jobs, job(jobs.OpDrift, 1, jobs.OutcomeFailed, 995))
		}, "", DriftDue + BackoffSuffix, false, time.Minute},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			in := base()
			tc.change(&in)
			d := Decide(in)
			if d.Op != tc.wantOp || d.Reason != tc.wantReason || d.DropFinalizer != tc.wantDrop || d.RequeueAfter != tc.wantAfter {
				t.Fatalf("Decide = op %q reason %q drop %v requeue %v; want op %q reason %q drop %v requeue %v",
					d.Op, d.Reason, d.DropFinalizer, d.RequeueAfter, tc.wantOp, tc.wantReason, tc.wantDrop, tc.wantAfter)
			}
		})
	}
}

func TestBackoffIsOneTwoThenTheCapWithLimitThree(t *testing.T) {
	for n, want := range []time.Duration{time.Minute, 2 * time.Minute, 10 * time.Minute, 10 * time.Minute} {
		in := base()
		in.CurrentInputsHash = "h1:new"
		for i := 0; i <= n; i++ {
			in.Jobs = append(in.Jobs, job(jobs.OpApply, int32(i+2), jobs.OutcomeFailed, 900+i))
		}
		// The newest failure finished RunTime after its creation; look right then.
		in.Now = at(900 + n).Add(jobstest.RunTime)
		d := Decide(in)
		if d.Op != "" || d.Backoff == nil || d.Backoff.Delay != want || d.RequeueAfter != want {
			t.Errorf("after %d failures: %+v, want a %v backoff", n+1, d, want)
		}
		in.Now = in.Now.Add(want)
		if d := Decide(in); d.Op != jobs.OpApply {
			t.Errorf("after %d failures and %v: %+v, want the apply", n+1, want, d)
		}
	}
}

func TestDecisionCarriesTheNameSources(t *testing.T) {
	in := base()
	in.Kind, in.LastRefresh = jobs.KindMachinePool, at(3)
	d := Decide(in)
	if d.Names.StateInputsHash != "h1:old" || !d.Names.LastRefresh.Equal(at(3)) || d.Names.CurrentInputsHash != "h1:old" {
		t.Fatalf("names = %+v", d.Names)
	}
	in = base()
	in.Jobs = append(in.Jobs, job(jobs.OpApply, 2, jobs.OutcomeFailed, 10))
	if d := Decide(in); !d.AfterFailedApply {
		t.Fatalf("an apply after a failed apply is not marked: %+v", d)
	}
}

func TestJitterIsDeterministicAndBounded(t *testing.T) {
	for _, uid := range []string{"a", "b", "c", "0f1e2d"} {
		j := Jitter(types.UID(uid), 30*time.Minute)
		if j != Jitter(types.UID(uid), 30*time.Minute) || j < 0 || j >= 3*time.Minute {
			t.Errorf("Jitter(%s) = %v", uid, j)
		}
	}
	if Jitter("a", 5*time.Nanosecond) != 0 {
		t.Error("an interval too short for jitter has none")
	}
}

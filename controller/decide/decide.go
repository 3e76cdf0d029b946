// Package decide chooses the next operation of an object: a pure function of the object's facts,
// its state, its retained Jobs and the time, so every rule of the priority table is tested as a
// table row. The controller gathers the facts and carries the decision out.
package decide

import (
	"errors"
	"hash/fnv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/jobs"
)

// Reasons of a decision. A due op held back by its backoff gets the reason plus BackoffSuffix.
const (
	JobActive              = "JobActive"
	DeletionHeld           = "DeletionHeld"
	DeletingWithoutState   = "DeletingWithoutState"
	Deleting               = "Deleting"
	StateUnreadable        = "StateUnreadable"
	StateLost              = "StateLost"
	NoState                = "NoState"
	StateWithoutInputsHash = "StateWithoutInputsHash"
	InputsChanged          = "InputsChanged"
	LastApplyFailed        = "LastApplyFailed"
	InputsUnavailable      = "InputsUnavailable"
	RefreshAfterApply      = "RefreshAfterApply"
	DriftDue               = "DriftDue"
	UpToDate               = "UpToDate"
	DriftRemediation       = "DriftRemediation"
	RestoreRequested       = "RestoreRequested"
	PlanAwaitingApproval   = "PlanAwaitingApproval"
	DestructivePlanBlocked = "DestructivePlanBlocked"
	// Abandoned: a deleted object whose infrastructure a person abandoned
	// (captf.io/abandon-infrastructure=<uid>) is let go without a destroy.
	Abandoned = "Abandoned"
	// MembershipRefresh: a pool's members are read again on their own schedule.
	MembershipRefresh = "MembershipRefresh"
	// HealthCheckDue: a machine that may ask for its replacement has its health read again
	// (spec.remediation.healthCheckIntervalSeconds).
	HealthCheckDue = "HealthCheckDue"
	// WaitingForDependents: a deleted cluster waits until its machines and pools are gone.
	WaitingForDependents = "WaitingForDependents"
	// DependenciesNotReady: what a run needs from Cluster API is not there (DependenciesReady
	// says what); nothing starts until it is, but a deletion goes ahead.
	DependenciesNotReady = "DependenciesNotReady"
	// IdentityNotAllowed: the object's identity lends it no credentials (IdentityAllowed says
	// why); nothing starts, a destroy included, unless the infrastructure is abandoned.
	IdentityNotAllowed = "IdentityNotAllowed"
	// ReplanRequested: a person asked for a fresh plan (captf.io/replan) of a Manual object
	// whose apply is due, and no plan Job started since carries the request.
	ReplanRequested = "ReplanRequested"

	// BackoffSuffix marks a due op that waits for its backoff window, e.g. InputsChangedBackoff.
	BackoffSuffix = "Backoff"
)

// Requeue intervals of the decisions that start nothing.
const (
	JobActiveRequeue  = time.Minute
	StateRequeue      = time.Minute
	InputsRequeue     = 10 * time.Minute
	ApprovalRequeue   = 10 * time.Minute
	DependentsRequeue = 30 * time.Second
	// DependenciesRequeue looks again for what Cluster API has not provided yet; most of it
	// is watched, but the bootstrap data Secret is not.
	DependenciesRequeue  = 20 * time.Second
	DefaultDriftInterval = 30 * time.Minute
	// DefaultMembershipRefresh and MembershipConvergingInterval are a pool's refresh periods.
	DefaultMembershipRefresh     = time.Minute
	MembershipConvergingInterval = 30 * time.Second
	maxJitterFractionDenom       = 10 // jitter is at most a tenth of the interval
)

// Input holds the facts a decision is made from.
type Input struct {
	Kind      jobs.Kind
	UID       types.UID
	CreatedAt time.Time
	Deleting  bool
	// Abandoned is set when captf.io/abandon-infrastructure names the object's UID: a deletion
	// lets the infrastructure go instead of destroying it.
	Abandoned bool
	// Dependents counts the machines and pools of a deleted cluster that still exist.
	Dependents int
	// Dependencies is the DependenciesReady reason while what a run needs from Cluster API is
	// not there; "" when it is.
	Dependencies string
	// IdentityNotAllowed is the IdentityAllowed reason while the object's identity lends it no
	// credentials; "" when it does or the object has none. Even a destroy waits for it.
	IdentityNotAllowed string
	// Mutable is true when changed inputs are applied again: clusters and pools always,
	// machines never (their inputs are immutable once provisioned).
	Mutable bool
	// State is the object's state; StateErr is set when it could not be read.
	State    state.State
	StateErr error
	// CurrentInputsHash is the hash of the inputs rendered in this pass; empty when the inputs
	// could not be rendered.
	CurrentInputsHash string
	// InterruptedApply names an apply Job that disappeared while it ran; an apply is due.
	InterruptedApply string
	// Jobs are the object's retained Jobs.
	Jobs   []batchv1.Job
	Limits jobs.Limits
	// Drift is the object's drift policy.
	Drift infrav1.DriftSpec
	// LastDriftCheck and LastRefresh are when the last successful drift check and refresh
	// finished; zero when none did.
	LastDriftCheck time.Time
	LastRefresh    time.Time
	Now            time.Time

	// Manual is applyPolicy Manual: applies go through an approved plan.
	Manual bool
	// Plan is the plan waiting for approval (status.plan), if any.
	Plan *Plan
	// ApprovedPlan is the plan hash a person approved (captf.io/approve-plan).
	ApprovedPlan string
	// Replan is the value of captf.io/replan: a request for a fresh plan, handled once a plan Job
	// carries it (ReplanPending).
	Replan string
	// Guarded is set when applies stop before a destructive plan (clusters under Automatic).
	Guarded bool
	// ApprovedDestructive is the inputs hash whose destructive plan a person approved
	// (captf.io/approve-destructive-plan).
	ApprovedDestructive string
	// Restore is a requested state restore, if any.
	Restore *Restore

	// MembershipRefresh is how often a pool's members are read again with a refresh; 0 for
	// kinds without members. MembershipConverging shortens it to MembershipConvergingInterval
	// while the pool's provider IDs and replicas disagree or its health is pending.
	MembershipRefresh    time.Duration
	MembershipConverging bool
	// HealthCheck is how often a machine's health is read again with a refresh, so that it can
	// ask for its replacement; 0 when it does not.
	HealthCheck time.Duration
}

// Plan is the plan of a Manual object that waits for approval.
type Plan struct {
	InputsHash string
	PlanHash   string
}

// Restore is a backup a person asked to restore (captf.io/restore-state).
type Restore struct {
	Serial     string
	BackupName string
	InputsHash string
	// Resources is how many resource instances the backup holds.
	Resources int
	// Chunks is how many Secrets the backup's state is in: 1, or more for a state larger than
	// one Secret.
	Chunks int
}

// Decision is what to do now.
type Decision struct {
	// Op is the operation to start; empty to start nothing.
	Op jobs.Op
	// Reason says why, as recorded in metrics and conditions.
	Reason string
	// DropFinalizer is set when a deleted object has nothing left to destroy.
	DropFinalizer bool
	// RequeueAfter is when to look again when nothing starts; zero means only on change.
	RequeueAfter time.Duration
	// Names are the facts the Job's name is made from.
	Names jobs.NameSources
	// AfterFailedApply marks an apply started because the previous one failed.
	AfterFailedApply bool
	// Backoff is the window that holds a due op back.
	Backoff *jobs.BackoffWindow
	// ExpectPlan is the approved plan hash an apply must match (Manual).
	ExpectPlan string
	// Guard asks the runner to stop before a destructive plan; AllowDeletesHash is the inputs
	// hash whose destructive plan was approved.
	Guard            bool
	AllowDeletesHash string
	// RestoreSerial is the serial a restore pushes back; RestoreResources how many resource
	// instances its backup holds.
	RestoreSerial    string
	RestoreResources int
	// RestoreChunks is how many Secrets the backup's state is in.
	RestoreChunks int
	// Replan is the captf.io/replan request a started plan serves: any plan started while the
	// object carries one is fresher than the request.
	Replan string
}

// Decide applies the priority table: the first matching row wins.
func Decide(in Input) Decision {
	if active := jobs.ActiveJob(in.Jobs); active != nil {
		return Decision{Reason: JobActive, RequeueAfter: JobActiveRequeue}
	}
	if r := in.Restore; r != nil && !restoreFailed(in.Jobs, r.Serial) && (!in.Deleting || in.StateErr != nil) {
		d := Decision{Op: jobs.OpRestore, Reason: RestoreRequested, RestoreSerial: r.Serial, RestoreResources: r.Resources, RestoreChunks: r.Chunks}
		d.Names = jobs.NameSources{BackupInputsHash: r.InputsHash, BackupName: r.BackupName}
		return d
	}
	if in.Deleting {
		switch {
		case in.Abandoned:
			return Decision{Reason: Abandoned, DropFinalizer: true}
		case in.Dependents > 0:
			return Decision{Reason: WaitingForDependents, RequeueAfter: DependentsRequeue}
		case in.IdentityNotAllowed != "" && !in.State.Empty():
			return Decision{Reason: IdentityNotAllowed, RequeueAfter: DependenciesRequeue}
		case in.StateErr != nil:
			return Decision{Reason: DeletionHeld, RequeueAfter: StateRequeue}
		case in.State.Empty():
			return Decision{Reason: DeletingWithoutState, DropFinalizer: true}
		}
		return in.start(jobs.OpDestroy, Deleting)
	}
	if in.Dependencies != "" {
		return Decision{Reason: DependenciesNotReady, RequeueAfter: DependenciesRequeue}
	}
	if in.IdentityNotAllowed != "" {
		return Decision{Reason: IdentityNotAllowed, RequeueAfter: DependenciesRequeue}
	}
	if in.StateErr != nil {
		if errors.Is(in.StateErr, state.ErrLost) {
			return Decision{Reason: StateLost, RequeueAfter: StateRequeue}
		}
		return Decision{Reason: StateUnreadable, RequeueAfter: StateRequeue}
	}
	if d, ok := in.dueApply(); ok {
		if in.CurrentInputsHash == "" {
			return Decision{Reason: InputsUnavailable, RequeueAfter: InputsRequeue}
		}
		return d
	}
	if d, ok := in.remediation(); ok {
		return d
	}
	return in.schedule()
}

// remediation applies the current inputs again when a drift check found drift and the action is
// Remediate, while the failed remediations since the last good drift check are below the cap.
func (in Input) remediation() (Decision, bool) {
	if !in.Mutable || in.Drift.Action != infrav1.DriftActionRemediate || !DriftFound(in.Jobs) ||
		!jobs.RemediationAllowed(in.Jobs, in.LastDriftCheck, in.Limits) || in.CurrentInputsHash == "" {
		return Decision{}, false
	}
	d, ok := in.gated(DriftRemediation, true)
	if !ok {
		return Decision{}, false // a remediation waiting for a person keeps the schedule running
	}
	return d, true
}

// gated turns a due apply into what the apply policy allows: under Manual a plan, or the apply
// of an approved plan, or a wait for approval; under the guard an apply that stops before a
// destructive plan, unless that plan was approved, and a wait after a blocked apply of the same
// inputs. ok is false when the apply waits for a person.
func (in Input) gated(reason string, remediation bool) (Decision, bool) {
	if in.Manual {
		plan := in.Plan
		if ReplanPending(in.Jobs, in.Replan) {
			return in.startPlan(ReplanRequested), true
		}
		if plan == nil || plan.InputsHash != in.CurrentInputsHash || !strings.HasPrefix(plan.PlanHash, jobs.PlanHashPrefix) {
			return in.startPlan(reason), true
		}
		if in.ApprovedPlan != plan.PlanHash && plan.PlanHash != jobs.EmptyPlanHash {
			return Decision{Reason: PlanAwaitingApproval, RequeueAfter: ApprovalRequeue}, false
		}
		d := in.startApply(reason, remediation)
		d.ExpectPlan = plan.PlanHash
		return d, true
	}
	d := in.startApply(reason, remediation)
	if in.Guarded {
		d.Guard = true
		if in.ApprovedDestructive == in.CurrentInputsHash {
			d.AllowDeletesHash = in.ApprovedDestructive
		} else if blockedInputs(in.Jobs, in.CurrentInputsHash) {
			return Decision{Reason: DestructivePlanBlocked, RequeueAfter: ApprovalRequeue}, false
		}
	}
	return d, true
}

// startPlan starts a plan, which serves any replan request the object carries.
func (in Input) startPlan(reason string) Decision {
	d := in.start(jobs.OpPlan, reason)
	if d.Op == jobs.OpPlan {
		d.Replan = in.Replan
	}
	return d
}

// ReplanPending reports whether request, a captf.io/replan value, still asks for a plan: it is
// set and no retained plan Job carries it. Every plan Job started while the object carries the
// request records it, and pruning keeps an op's newest Job, so a handled request stays handled.
func ReplanPending(all []batchv1.Job, request string) bool {
	if request == "" {
		return false
	}
	for _, j := range jobs.OpJobs(all, jobs.OpPlan) {
		if j.Annotations[jobs.AnnotationReplan] == request {
			return false
		}
	}
	return true
}

func (in Input) startApply(reason string, remediation bool) Decision {
	d := in.start(jobs.OpApply, reason)
	d.Names.DriftRemediation = remediation
	return d
}

// DriftFound reports whether the newest successful drift check found drift that no later
// successful apply has resolved.
func DriftFound(all []batchv1.Job) bool {
	check, checked, ok := jobs.NewestSuccess(all, jobs.OpDrift)
	if check == nil {
		return false
	}
	summary, err := jobs.DecodeSummary(check.Annotations[jobs.AnnotationResult])
	if err != nil || summary.Drift == nil || !summary.Drift.Detected || !ok {
		return false
	}
	// Runs of one object never overlap and each takes longer than a second, so an apply that
	// finished in the same second as the check (times are kept to the second) came after it.
	_, applied, ok := jobs.NewestSuccess(all, jobs.OpApply)
	return !ok || applied.Before(checked)
}

// blockedInputs reports whether the newest apply of these inputs was blocked before a
// destructive plan: it is not retried until approved or the inputs change.
func blockedInputs(all []batchv1.Job, inputsHash string) bool {
	for _, j := range jobs.OpJobs(all, jobs.OpApply) {
		if j.Annotations[jobs.AnnotationInputsHash] == inputsHash && jobs.OutcomeOf(j).Finished() {
			return jobs.OutcomeOf(j) == jobs.OutcomeBlocked
		}
	}
	return false
}

// restoreFailed reports whether a restore of serial already ran and failed: a restore is never
// retried for the same serial.
func restoreFailed(all []batchv1.Job, serial string) bool {
	for _, j := range jobs.OpJobs(all, jobs.OpRestore) {
		if j.Annotations[jobs.AnnotationRestoreSerial] == serial && jobs.OutcomeOf(j).Finished() && !jobs.OutcomeOf(j).Succeeded() {
			return true
		}
	}
	return false
}

// dueApply returns the apply the table asks for, if any.
func (in Input) dueApply() (Decision, bool) {
	switch {
	case !in.State.Exists && in.Manual:
		// The first apply, with nothing to destroy, is never held for approval.
		return in.start(jobs.OpApply, NoState), true
	case !in.State.Exists:
		return in.waitOrApply(NoState)
	case in.State.InputsHash == "":
		return in.waitOrApply(StateWithoutInputsHash)
	case !in.Mutable:
		return Decision{}, false
	case in.CurrentInputsHash != "" && in.CurrentInputsHash != in.State.InputsHash:
		return in.waitOrApply(InputsChanged)
	case in.InterruptedApply != "" || lastApplyFailed(in.Jobs):
		d, _ := in.waitOrApply(LastApplyFailed)
		d.AfterFailedApply = d.Op == jobs.OpApply
		return d, true
	}
	return Decision{}, false
}

// waitOrApply gates a due apply; a wait for a person also holds the schedule, since a drift
// check would render inputs that were never applied.
func (in Input) waitOrApply(reason string) (Decision, bool) {
	d, _ := in.gated(reason, false)
	return d, true
}

// schedule picks the background op that is due, or when to look again.
func (in Input) schedule() Decision {
	if in.Kind != jobs.KindCluster {
		if _, applied, ok := jobs.NewestSuccess(in.Jobs, jobs.OpApply); ok && applied.After(in.LastRefresh) {
			return in.start(jobs.OpRefresh, RefreshAfterApply)
		}
	}
	membership := in.membershipDue()
	if membership.Reason != "" {
		// Due: started, or held back by its backoff.
		return membership
	}
	interval := DriftInterval(in.Drift)
	if interval <= 0 {
		return Decision{Reason: UpToDate, RequeueAfter: membership.RequeueAfter}
	}
	base := in.LastDriftCheck
	if base.IsZero() {
		if _, applied, ok := jobs.NewestSuccess(in.Jobs, jobs.OpApply); ok {
			base = applied
		} else {
			base = in.CreatedAt
		}
	}
	due := base.Add(interval + Jitter(in.UID, interval))
	if in.Now.Before(due) {
		wait := due.Sub(in.Now)
		if membership.RequeueAfter > 0 && membership.RequeueAfter < wait {
			wait = membership.RequeueAfter
		}
		return Decision{Reason: UpToDate, RequeueAfter: wait}
	}
	return in.start(jobs.OpDrift, DriftDue)
}

// membershipDue starts the refresh that is due on its own schedule: a pool's membership
// refresh, or a machine's health check, when its period has passed since the last refresh (or
// apply); otherwise it says when it will be due.
func (in Input) membershipDue() Decision {
	period, reason := in.MembershipRefresh, MembershipRefresh
	switch {
	case period > 0:
		if in.MembershipConverging && period > MembershipConvergingInterval {
			period = MembershipConvergingInterval
		}
	case in.HealthCheck > 0:
		period, reason = in.HealthCheck, HealthCheckDue
	default:
		return Decision{}
	}
	base := in.LastRefresh
	if _, applied, ok := jobs.NewestSuccess(in.Jobs, jobs.OpApply); ok && applied.After(base) {
		base = applied
	}
	if due := base.Add(period); in.Now.Before(due) {
		return Decision{RequeueAfter: due.Sub(in.Now)}
	}
	return in.start(jobs.OpRefresh, reason)
}

// start chooses op unless its backoff window holds it back.
func (in Input) start(op jobs.Op, reason string) Decision {
	names := jobs.NameSources{
		CurrentInputsHash: in.CurrentInputsHash,
		StateInputsHash:   in.State.InputsHash,
		LastDriftCheck:    in.LastDriftCheck,
		LastRefresh:       in.LastRefresh,
	}
	if window, inside := jobs.Backoff(in.Jobs, op, in.Limits, in.Now); inside {
		return Decision{Reason: reason + BackoffSuffix, RequeueAfter: window.RetryAfter.Sub(in.Now), Backoff: &window, Names: names}
	}
	return Decision{Op: op, Reason: reason, Names: names}
}

// DriftInterval resolves the drift interval: unset means the default, 0 turns checks off.
func DriftInterval(d infrav1.DriftSpec) time.Duration {
	if d.IntervalSeconds == nil {
		return DefaultDriftInterval
	}
	return time.Duration(*d.IntervalSeconds) * time.Second
}

// Jitter spreads the schedules of many objects: a deterministic fraction of at most a tenth of
// the interval, from the FNV-64a hash of the object's UID.
func Jitter(uid types.UID, interval time.Duration) time.Duration {
	span := int64(interval / maxJitterFractionDenom)
	if span <= 0 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(uid))
	return time.Duration(h.Sum64() % uint64(span))
}

// lastApplyFailed reports whether the newest finished apply, remediation applies aside, calls
// for another: it failed in a way that counts, or it was interrupted from outside (free of
// backoff, so retried at once). A blocked or plan-changed apply waits for a person, not a retry,
// unless it was itself the retry of a failed apply: the failure it retried is still unresolved,
// so the apply stays due and the approval it waits for lets it start.
func lastApplyFailed(all []batchv1.Job) bool {
	for _, j := range jobs.OpJobs(all, jobs.OpApply) {
		outcome := jobs.OutcomeOf(j)
		if !outcome.Finished() || j.Annotations[jobs.AnnotationDriftRemediation] == "true" {
			continue
		}
		switch outcome {
		case jobs.OutcomeInterrupted:
			return true
		case jobs.OutcomeBlocked, jobs.OutcomePlanChanged:
			return j.Annotations[jobs.AnnotationAfterFailedApply] == "true"
		}
		return outcome.CountsAsFailure()
	}
	return false
}

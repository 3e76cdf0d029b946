package jobs

import (
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/captf/captf/apis/runs"
)

// TargetGroup is the API group of the kinds that run Jobs.
const TargetGroup = "infrastructure.cluster.x-k8s.io"

// TargetAPIVersion is the apiVersion of the kinds that run Jobs.
const TargetAPIVersion = TargetGroup + "/v1alpha1"

// TargetOf returns the object a Job runs for: the one ControllerOf names, since the owner-name
// label is hashed for long names; otherwise the owner labels with TargetAPIVersion. The labels
// are only what the Job claims: whether it is a run of any object at all is ControllerOf's to
// say.
func TargetOf(job *batchv1.Job) runs.Target {
	if t, _, ok := ControllerOf(job); ok {
		return t
	}
	return runs.Target{APIVersion: TargetAPIVersion, Kind: job.Labels[LabelOwnerKind], Name: job.Labels[LabelOwnerName]}
}

// IsTargetReference reports whether an owner reference of apiVersion and kind names an object
// that runs Jobs: a kind that runs Jobs, in TargetGroup at any version.
func IsTargetReference(apiVersion, kind string) bool {
	group, _, ok := strings.Cut(apiVersion, "/")
	return ok && group == TargetGroup && Kind(kind).Valid()
}

// ControllerOf returns the object job is a run of and that object's UID: the object its
// controller owner reference names, when IsTargetReference holds for it. ok is false for any
// other Job, however it is labelled: anyone who may create Jobs can copy the captf labels, but
// a Job counts as an object's run (its history, attempts, backoff, plans and approvals) only
// through the controller reference the controller sets to the object's UID.
func ControllerOf(job *batchv1.Job) (target runs.Target, uid types.UID, ok bool) {
	ref := metav1.GetControllerOfNoCopy(job)
	if ref == nil || !IsTargetReference(ref.APIVersion, ref.Kind) {
		return runs.Target{}, "", false
	}
	return runs.Target{APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name}, ref.UID, true
}

// IsRunOf reports whether job is a run of the object with uid: ControllerOf names that UID.
func IsRunOf(job *batchv1.Job, uid types.UID) bool {
	_, owner, ok := ControllerOf(job)
	return ok && owner == uid
}

// RunsOf returns the Jobs of retained that are runs of the object with uid (IsRunOf), so that a
// Job with copied labels, or one of an earlier object of the same name, never enters its
// history. It returns retained itself when every Job is one.
func RunsOf(retained []batchv1.Job, uid types.UID) []batchv1.Job {
	for i := range retained {
		if IsRunOf(&retained[i], uid) {
			continue
		}
		out := append(make([]batchv1.Job, 0, len(retained)-1), retained[:i]...)
		for j := i + 1; j < len(retained); j++ {
			if IsRunOf(&retained[j], uid) {
				out = append(out, retained[j])
			}
		}
		return out
	}
	return retained
}

// RunView is everything the runs API computes about one retained Job, so the API server only
// converts it to its types.
type RunView struct {
	// Target is the object the Job runs for.
	Target runs.Target
	// Operation is the Job's op; "" when its label is missing or unknown.
	Operation Op
	// Attempt is the Job's attempt number; 0 when its label is missing, unparsable or out of
	// bounds (see AttemptOf).
	Attempt int32
	// InputsHash is the inputs hash the Job was created with, when recorded.
	InputsHash string
	// DriftRemediation is set on an apply that remediates drift.
	DriftRemediation bool
	// ApprovedPlan is the plan hash an apply under applyPolicy Manual had to plan again.
	ApprovedPlan string

	// Phase is Pending until the Job starts, then its Outcome.
	Phase runs.RunPhase
	// StartTime is the Job's status.startTime.
	StartTime *metav1.Time
	// CompletionTime is when the Job finished; see FinishedAt.
	CompletionTime *metav1.Time
	// Duration is from start to finish, or to now while the Job runs.
	Duration time.Duration
	// RetryNumber is 1 plus the counted failures of the op since its last success before this
	// Job; see RetryNumber.
	RetryNumber int
	// CountsTowardBackoff is set when the Job's outcome counts as a failure.
	CountsTowardBackoff bool
	// Backoff is the op's backoff window, set only on the op's newest counted failure.
	Backoff *BackoffWindow
	// BackoffActive is set when now is inside Backoff.
	BackoffActive bool
	// Retention says why the Job is still retained; see Retentions.
	Retention runs.Retention

	// Error, Changes and Drift come from the Job's result summary.
	Error *ErrorSummary
	// Changes counts what the run changed.
	Changes *Changes
	// Drift is what a drift check found.
	Drift *DriftSummary
	// ResultUnreadable is set when the Job has a result annotation that could not be read.
	ResultUnreadable bool
}

// ViewRun computes the RunView of job. retained are the retained Jobs of the same object (job
// is added when missing, and replaces the Job of its name), limits are the object's history
// limits, and now is the reading time for a running Job's duration and for whether the backoff
// window is active. To view every Job of an object, build one History instead: it walks the
// Jobs once for all of them.
func ViewRun(job batchv1.Job, retained []batchv1.Job, limits Limits, now time.Time) RunView {
	h := NewHistory(replacingJob(retained, job), limits)
	return h.ViewRun(h.Index(job.Name), now)
}

// History is the retained Jobs of one object with what the views of its runs share computed
// once: each op's newest-first order, the retentions, the retry numbers and the failure
// streaks. Viewing all n runs of an object through one History costs O(n log n), where a
// ViewRun per Job would walk the other Jobs for each.
type History struct {
	jobs      []batchv1.Job
	byName    map[string]int
	retention []runs.Retention
	retry     []int
	// backoff is the op's backoff window, by the index of the op's newest counted failure.
	backoff map[int]BackoffWindow
}

// NewHistory indexes the retained Jobs of one object under its history limits. It keeps
// retained; the caller must not change it while the History is in use.
func NewHistory(retained []batchv1.Job, limits Limits) *History {
	h := &History{
		jobs:      retained,
		byName:    make(map[string]int, len(retained)),
		retention: make([]runs.Retention, len(retained)),
		retry:     make([]int, len(retained)),
		backoff:   map[int]BackoffWindow{},
	}
	index := make(map[*batchv1.Job]int, len(retained))
	for i := range retained {
		index[&retained[i]] = i
		h.byName[retained[i].Name] = i
		h.retention[i] = runs.RetentionUnknownOperation
		h.retry[i] = 1
	}
	for _, op := range Ops() {
		opJobs := OpJobs(retained, op)
		if len(opJobs) == 0 {
			continue
		}
		retentions, retries := opRetentions(opJobs, limits), retryNumbers(opJobs)
		for k, j := range opJobs {
			h.retention[index[j]], h.retry[index[j]] = retentions[k], retries[k]
		}
		if failures := streak(opJobs); len(failures) > 0 {
			h.backoff[index[failures[0]]] = backoffWindow(failures, limits)
		}
	}
	return h
}

// Len is the number of Jobs in the history.
func (h *History) Len() int { return len(h.jobs) }

// Job returns the Job at index i.
func (h *History) Job(i int) *batchv1.Job { return &h.jobs[i] }

// Index returns the index of the Job named name, or -1.
func (h *History) Index(name string) int {
	if i, ok := h.byName[name]; ok {
		return i
	}
	return -1
}

// ViewRun computes the RunView of the Job at index i, read at now.
func (h *History) ViewRun(i int, now time.Time) RunView {
	job := &h.jobs[i]
	outcome := OutcomeOf(job)
	v := RunView{
		Target:              TargetOf(job),
		Operation:           OpOf(job),
		Attempt:             AttemptOf(job),
		InputsHash:          job.Annotations[AnnotationInputsHash],
		DriftRemediation:    hasMark(job.Annotations, AnnotationDriftRemediation),
		ApprovedPlan:        job.Annotations[AnnotationApprovedPlan],
		Phase:               runs.RunPhase(outcome),
		StartTime:           job.Status.StartTime,
		RetryNumber:         h.retry[i],
		CountsTowardBackoff: outcome.CountsAsFailure(),
		Retention:           h.retention[i],
	}
	if !outcome.Finished() && job.Status.StartTime == nil {
		v.Phase = runs.RunPhasePending
	}

	started, hasStart := StartedAt(job)
	finished, hasFinish := FinishedAt(job)
	if hasFinish {
		v.CompletionTime = &metav1.Time{Time: finished}
	}
	switch {
	case v.Phase == runs.RunPhasePending || !hasStart:
		// Not started: no duration yet.
	case hasFinish:
		v.Duration = max(finished.Sub(started), 0)
	case !outcome.Finished():
		v.Duration = max(now.Sub(started), 0)
	}

	if w, ok := h.backoff[i]; ok {
		v.Backoff = &w
		v.BackoffActive = now.Before(w.RetryAfter)
	}

	if s, ok, err := summaryOf(job); ok {
		v.ResultUnreadable = err != nil
		v.Error, v.Changes, v.Drift = s.Error, s.Changes, s.Drift
	}
	return v
}

// withJob returns retained with job appended when no Job of its name is there.
func withJob(retained []batchv1.Job, job batchv1.Job) []batchv1.Job {
	for i := range retained {
		if retained[i].Name == job.Name {
			return retained
		}
	}
	return append(append([]batchv1.Job(nil), retained...), job)
}

// replacingJob returns a copy of retained with job in place of the Job of its name, or
// appended when there is none: job is the caller's newer word on that Job.
func replacingJob(retained []batchv1.Job, job batchv1.Job) []batchv1.Job {
	out := make([]batchv1.Job, 0, len(retained)+1)
	for i := range retained {
		if retained[i].Name != job.Name {
			out = append(out, retained[i])
		}
	}
	return append(out, job)
}

// summaryOf decodes the Job's result annotation; ok is false when it has none.
func summaryOf(job *batchv1.Job) (s Summary, ok bool, err error) {
	value, ok := job.Annotations[AnnotationResult]
	if !ok {
		return Summary{}, false, nil
	}
	s, err = DecodeSummary(value)
	return s, true, err
}

// CurrentPlan is the object's status.plan: the plan waiting for approval.
type CurrentPlan struct {
	// InputsHash is the inputs hash the plan was made from.
	InputsHash string
	// PlanHash is the plan's p3: hash.
	PlanHash string
	// Job is the Job that produced the plan.
	Job string
}

// PlanOwner is what a plan's phase needs from the owning object.
type PlanOwner struct {
	// UID is the object's UID. When set, only the object's runs count (RunsOf): the other Jobs
	// of retained are left out, and a Job that is not one carries no plan of the object. When
	// empty, the caller has chosen the object's runs itself.
	UID types.UID
	// Plan is status.plan; nil when the object has none.
	Plan *CurrentPlan
	// CurrentInputsHash is the hash of the object's current inputs; "" when unknown, in which
	// case only status.plan and the Jobs decide which plan is current.
	CurrentInputsHash string
	// ApprovePlan is the captf.io/approve-plan annotation.
	ApprovePlan string
	// ApproveDestructivePlan is the captf.io/approve-destructive-plan annotation.
	ApproveDestructivePlan string
	// ApprovedBy is the captf.io/approved-by annotation.
	ApprovedBy string
	// ApprovedAt is when the approval was written, when known.
	ApprovedAt *metav1.Time
	// Verify reports whether a plan's Job is as the controller last wrote it (its signature
	// verifies); a plan whose Job fails it is Unverified. Whoever may patch Jobs can rewrite
	// the hash, counts and resources a plan shows, and the hash an approval writes. nil
	// verifies nothing, for callers that verify the Jobs elsewhere.
	Verify func(*batchv1.Job) bool
}

// PlanView is everything the plans API computes about one plan.
type PlanView struct {
	// Target is the object the plan is for.
	Target runs.Target
	// Source says what the plan comes from.
	Source runs.PlanSource
	// Phase is the plan's phase.
	Phase runs.PlanPhase
	// InputsHash is the inputs hash the plan was made from.
	InputsHash string
	// PlanHash is the plan's p3: hash, when the run reported one.
	PlanHash string
	// ApprovalHash is the hash an approval must quote and that PlanApprovalCheck writes: the
	// plan hash, or for a blocked apply its inputs hash.
	ApprovalHash string
	// Add counts resources to create.
	Add int
	// Change counts resources to update.
	Change int
	// Destroy counts resources to delete or replace.
	Destroy int
	// Resources lists at most MaxPlanResources changes.
	Resources []ResourceChange
	// Truncated is set when Resources does not list every change.
	Truncated bool
	// Destructive is set when a change deletes or replaces.
	Destructive bool
	// ApprovedBy and ApprovedAt are set while the object's approval names this plan.
	ApprovedBy string
	// ApprovedAt is when the approval was written, when known.
	ApprovedAt *metav1.Time
	// ResultUnreadable is set when the Job has a result annotation that could not be read.
	ResultUnreadable bool
}

// PlanSourceOf returns what plan job carries, and false when it carries none: a plan Job, an
// apply that reported plan-changed, or an apply blocked before a destructive plan.
func PlanSourceOf(job *batchv1.Job) (runs.PlanSource, bool) {
	switch op, outcome := OpOf(job), OutcomeOf(job); {
	case op == OpPlan:
		return runs.PlanSourcePlan, true
	case op == OpApply && outcome == OutcomePlanChanged:
		return runs.PlanSourceChangedApply, true
	case op == OpApply && outcome == OutcomeBlocked:
		return runs.PlanSourceBlockedApply, true
	}
	return "", false
}

// ViewPlan computes the PlanView of job, and false when job carries no plan (see PlanSourceOf),
// or owner.UID is set and job is not a run of that object. retained are the retained Jobs of
// the same object, which tell whether an apply of the plan succeeded or found it changed;
// owner is the owning object's plan status and approvals.
//
// A plan Job's phase: Planning while it runs; Failed when it failed or was unreadable; then
// Applied when an apply created after it with captf.io/approved-plan equal to its hash
// succeeded; Changed when such an apply reported plan-changed; Superseded when it is not
// status.plan (same Job and hash, made from the current inputs when those are known); Approved
// when captf.io/approve-plan equals its hash or the plan is empty (EmptyPlanHash needs no
// approval); AwaitingApproval otherwise. A plan-changed apply's new plan follows the same rules
// from "Applied" on.
//
// A blocked apply's phase: Applied when a newer apply of the same inputs hash succeeded;
// Superseded when the current inputs hash differs, or a newer apply of other inputs or a newer
// blocked apply exists; Approved when captf.io/approve-destructive-plan equals its inputs hash;
// AwaitingApproval otherwise.
//
// Whatever the rules above give, a plan whose Job does not pass owner.Verify is Unverified.
func ViewPlan(job batchv1.Job, retained []batchv1.Job, owner PlanOwner) (PlanView, bool) {
	source, ok := PlanSourceOf(&job)
	if !ok || (owner.UID != "" && !IsRunOf(&job, owner.UID)) {
		return PlanView{}, false
	}
	if owner.UID != "" {
		retained = RunsOf(retained, owner.UID)
	}
	retained = withJob(retained, job)
	v := PlanView{
		Target:     TargetOf(&job),
		Source:     source,
		InputsHash: job.Annotations[AnnotationInputsHash],
	}
	s, hasSummary, err := summaryOf(&job)
	v.ResultUnreadable = err != nil
	if p := s.Plan; p != nil {
		v.PlanHash, v.Add, v.Change, v.Destroy = p.Hash, p.Add, p.Change, p.Destroy
		v.Resources, v.Truncated, v.Destructive = p.Resources, p.Truncated, p.Destructive
	}

	approval := owner.ApprovePlan
	switch source {
	case runs.PlanSourceBlockedApply:
		v.Destructive = true
		v.ApprovalHash = v.InputsHash
		approval = owner.ApproveDestructivePlan
		v.Phase = blockedApplyPhase(&job, retained, owner)
	case runs.PlanSourcePlan:
		if v.PlanHash == "" && owner.Plan != nil && owner.Plan.Job == job.Name {
			// Bookkeeping records status.plan before the result annotation is read back.
			v.PlanHash = owner.Plan.PlanHash
		}
		v.ApprovalHash = v.PlanHash
		v.Phase = planJobPhase(&job, v.PlanHash, hasSummary, retained, owner)
	case runs.PlanSourceChangedApply:
		v.ApprovalHash = v.PlanHash
		v.Phase = runs.PlanPhaseFailed
		if v.PlanHash != "" {
			v.Phase = approvedPlanPhase(&job, v.PlanHash, retained, owner)
		}
	}
	if owner.Verify != nil && !owner.Verify(&job) {
		v.Phase = runs.PlanPhaseUnverified
	}
	if approval != "" && approval == v.ApprovalHash {
		v.ApprovedBy, v.ApprovedAt = owner.ApprovedBy, owner.ApprovedAt
	} else if v.Phase == runs.PlanPhaseApplied {
		// The approval was consumed by the apply; the apply Job carries who gave it.
		v.ApprovedBy, v.ApprovedAt = appliedApproval(&job, v.ApprovalHash, source, retained)
	}
	return v, true
}

// appliedApproval returns who approved the plan of job, as recorded on the apply Job that
// applied it: one with the approved plan hash, or for a blocked apply a later successful apply
// of the same inputs.
func appliedApproval(job *batchv1.Job, hash string, source runs.PlanSource, retained []batchv1.Job) (string, *metav1.Time) {
	for _, a := range OpJobs(retained, OpApply) {
		if a.Name == job.Name || !OutcomeOf(a).Succeeded() || a.Annotations[AnnotationApprovedBy] == "" {
			continue
		}
		matches := a.Annotations[AnnotationApprovedPlan] == hash
		if source == runs.PlanSourceBlockedApply {
			matches = a.Annotations[AnnotationInputsHash] == hash && newer(a, job)
		}
		if !matches {
			continue
		}
		return approverOf(a.Annotations)
	}
	return "", nil
}

// planJobPhase is the phase of a plan Job with the given hash.
func planJobPhase(job *batchv1.Job, hash string, hasSummary bool, retained []batchv1.Job, owner PlanOwner) runs.PlanPhase {
	switch outcome := OutcomeOf(job); {
	case !outcome.Finished():
		return runs.PlanPhasePlanning
	case !outcome.Succeeded():
		return runs.PlanPhaseFailed
	case hash == "" && (hasSummary || hasMark(job.Annotations, AnnotationBookkept)):
		// Bookkept without a hash: the plan is unreadable even if the mark is missing.
		return runs.PlanPhaseFailed
	case hash == "":
		return runs.PlanPhasePlanning
	}
	return approvedPlanPhase(job, hash, retained, owner)
}

// approvedPlanPhase is the phase of a finished plan with a hash, from "Applied" on.
func approvedPlanPhase(job *batchv1.Job, hash string, retained []batchv1.Job, owner PlanOwner) runs.PlanPhase {
	changed := false
	for _, a := range OpJobs(retained, OpApply) {
		if a.Name == job.Name || a.Annotations[AnnotationApprovedPlan] != hash || a.CreationTimestamp.Before(&job.CreationTimestamp) {
			continue
		}
		switch OutcomeOf(a) {
		case OutcomeSucceeded:
			return runs.PlanPhaseApplied
		case OutcomePlanChanged:
			changed = true
		}
	}
	p := owner.Plan
	current := p != nil && p.Job == job.Name && p.PlanHash == hash &&
		(owner.CurrentInputsHash == "" || p.InputsHash == owner.CurrentInputsHash)
	switch {
	case changed:
		return runs.PlanPhaseChanged
	case !current:
		return runs.PlanPhaseSuperseded
	case owner.ApprovePlan == hash || hash == EmptyPlanHash:
		return runs.PlanPhaseApproved
	}
	return runs.PlanPhaseAwaitingApproval
}

// blockedApplyPhase is the phase of an apply blocked before a destructive plan.
func blockedApplyPhase(job *batchv1.Job, retained []batchv1.Job, owner PlanOwner) runs.PlanPhase {
	hash := job.Annotations[AnnotationInputsHash]
	superseded := owner.CurrentInputsHash != "" && owner.CurrentInputsHash != hash
	for _, a := range OpJobs(retained, OpApply) {
		if !newer(a, job) {
			break
		}
		sameInputs := a.Annotations[AnnotationInputsHash] == hash
		switch outcome := OutcomeOf(a); {
		case sameInputs && outcome == OutcomeSucceeded:
			return runs.PlanPhaseApplied
		case !sameInputs, outcome == OutcomeBlocked:
			superseded = true
		}
	}
	switch {
	case superseded:
		return runs.PlanPhaseSuperseded
	case hash != "" && owner.ApproveDestructivePlan == hash:
		return runs.PlanPhaseApproved
	}
	return runs.PlanPhaseAwaitingApproval
}

// ApprovalVerdict is the outcome of an approval request.
type ApprovalVerdict string

// The approval verdicts.
const (
	// ApprovalAllowed: write the decision's annotations (HTTP 201).
	ApprovalAllowed ApprovalVerdict = "Allowed"
	// ApprovalNotFound: there is no such plan (HTTP 404).
	ApprovalNotFound ApprovalVerdict = "NotFound"
	// ApprovalConflict: the plan is not the object's current one, or the hash differs (HTTP 409).
	ApprovalConflict ApprovalVerdict = "Conflict"
)

// ApprovalDecision is what an approval request comes to.
type ApprovalDecision struct {
	// Verdict says whether to write.
	Verdict ApprovalVerdict
	// Message explains the verdict to the requester.
	Message string
	// Annotations are written on the owning object when the verdict is ApprovalAllowed.
	Annotations map[string]string
}

// PlanApprovalCheck decides an approval of job's plan quoting planHash, requested by user at
// now. job is nil when no Job of the requested name exists; retained and owner are as for
// ViewPlan, and with owner.UID set a job that is not a run of the object is not found (see
// WhyNotRunOf), since the approval is written on the object. A plan may be approved while it is
// AwaitingApproval or already Approved (the request is then idempotent) and the quoted hash
// equals its ApprovalHash; an Unverified plan never is (409, whatever hash it quotes). An
// allowed approval writes captf.io/approve-plan=<plan hash>, or for a blocked apply
// captf.io/approve-destructive-plan=<inputs hash>, plus captf.io/approved-by and
// captf.io/approved-at.
func PlanApprovalCheck(job *batchv1.Job, retained []batchv1.Job, owner PlanOwner, planHash, user string, now time.Time) ApprovalDecision {
	if job == nil {
		return ApprovalDecision{Verdict: ApprovalNotFound, Message: "plan not found"}
	}
	if owner.UID != "" {
		if why := WhyNotRunOf(job, owner.UID); why != "" {
			return ApprovalDecision{Verdict: ApprovalNotFound, Message: fmt.Sprintf("plan %q not found: %s", job.Name, why)}
		}
	}
	v, ok := ViewPlan(*job, retained, owner)
	if !ok {
		return ApprovalDecision{Verdict: ApprovalNotFound, Message: fmt.Sprintf("plan %q not found: Job %s carries no plan", job.Name, job.Name)}
	}
	target := fmt.Sprintf("%s %s", v.Target.Kind, v.Target.Name)
	conflict := func(format string, args ...any) ApprovalDecision {
		return ApprovalDecision{Verdict: ApprovalConflict, Message: fmt.Sprintf("plan %q ", job.Name) + fmt.Sprintf(format, args...)}
	}
	switch v.Phase {
	case runs.PlanPhaseAwaitingApproval, runs.PlanPhaseApproved:
	case runs.PlanPhasePlanning:
		return conflict("is still planning; approve it once it awaits approval")
	case runs.PlanPhaseApplied:
		return conflict("was already applied")
	case runs.PlanPhaseChanged:
		return conflict("changed when it was applied; approve the new plan of %s", target)
	case runs.PlanPhaseFailed:
		return conflict("failed and cannot be approved")
	case runs.PlanPhaseUnverified:
		return conflict("cannot be approved: the signature of Job %s does not verify, so someone other than the controller changed it; "+
			"make a new plan (kubectl captf replan %s) and review that one", job.Name, v.Target.Name)
	default:
		return conflict("is not the current plan of %s", target)
	}
	switch {
	case v.ApprovalHash == "":
		return conflict("has no hash to approve")
	case planHash != v.ApprovalHash:
		return conflict("has hash %s, not %s; review the plan again", v.ApprovalHash, planHash)
	}
	key := AnnotationApprovePlan
	if v.Source == runs.PlanSourceBlockedApply {
		key = AnnotationApproveDestructivePlan
	}
	return ApprovalDecision{
		Verdict: ApprovalAllowed,
		Message: fmt.Sprintf("plan %q of %s approved", job.Name, target),
		// approved-by and approved-at are always written, so no earlier approver's name stays
		// next to this approval.
		Annotations: map[string]string{
			key:                  v.ApprovalHash,
			AnnotationApprovedBy: user,
			AnnotationApprovedAt: now.UTC().Format(time.RFC3339),
		},
	}
}

// WhyNotRunOf says why job is not a run of the object with uid, or, with uid empty, of any
// object; it returns "" when job is one. The answers of the runs API quote it.
func WhyNotRunOf(job *batchv1.Job, uid types.UID) string {
	target, owner, ok := ControllerOf(job)
	switch {
	case !ok:
		return fmt.Sprintf("Job %s has no controller owner reference to a %s, %s or %s, so it is no run of captf",
			job.Name, KindCluster, KindMachine, KindMachinePool)
	case uid != "" && owner != uid:
		return fmt.Sprintf("Job %s was made for a %s %s with UID %s, not for the current one (UID %s)",
			job.Name, target.Kind, target.Name, owner, uid)
	}
	return ""
}

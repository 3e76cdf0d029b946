package runs

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RunPhase is the phase of a run: Pending until its Job starts, then how the Job ended or that
// it still runs.
type RunPhase string

// The phases of a run.
const (
	// RunPhasePending: the Job has no status.startTime yet.
	RunPhasePending RunPhase = "Pending"
	// RunPhaseRunning: the Job started and has neither a Complete nor a Failed condition.
	RunPhaseRunning RunPhase = "Running"
	// RunPhaseSucceeded: the Job completed.
	RunPhaseSucceeded RunPhase = "Succeeded"
	// RunPhaseFailed: the Job failed for any reason not listed below.
	RunPhaseFailed RunPhase = "Failed"
	// RunPhaseDeadlineExceeded: the Job's activeDeadlineSeconds stopped it, whatever the runner
	// reported.
	RunPhaseDeadlineExceeded RunPhase = "DeadlineExceeded"
	// RunPhaseInterrupted: the runner was stopped from outside, not by the deadline.
	RunPhaseInterrupted RunPhase = "Interrupted"
	// RunPhaseBlocked: an apply stopped before a plan that deletes or replaces resources.
	RunPhaseBlocked RunPhase = "Blocked"
	// RunPhasePlanChanged: an approved apply found that its plan no longer matched.
	RunPhasePlanChanged RunPhase = "PlanChanged"
	// RunPhasePlanUnreadable: a plan Job completed without a readable plan.
	RunPhasePlanUnreadable RunPhase = "PlanUnreadable"
)

// Retention says why a run is still kept, or that the next prune deletes it.
type Retention string

// The retention reasons.
const (
	// RetentionRunning: running Jobs are never pruned.
	RetentionRunning Retention = "Running"
	// RetentionNewestSuccess: the newest success of the operation is kept whatever the history
	// limits say, so that an older failure cannot pose as the operation's latest outcome.
	RetentionNewestSuccess Retention = "NewestSuccess"
	// RetentionUnresolvedFailure: the newest failure of the operation is kept while no newer
	// success exists, because backoff and the cap on failed drift remediations count it.
	RetentionUnresolvedFailure Retention = "UnresolvedFailure"
	// RetentionWithinLimit: the run is within its operation's successful or failed history
	// limit, whichever its outcome counts against.
	RetentionWithinLimit Retention = "WithinLimit"
	// RetentionBeyondLimit: the run is beyond its history limit; the next prune deletes it.
	RetentionBeyondLimit Retention = "BeyondLimit"
	// RetentionUnknownOperation: the Job's operation label is missing or unknown, so no
	// operation's history claims it and pruning leaves it alone.
	RetentionUnknownOperation Retention = "UnknownOperation"
)

// Target is the object a run or a plan belongs to.
type Target struct {
	// apiVersion of the object, infrastructure.cluster.x-k8s.io/v1alpha1.
	APIVersion string `json:"apiVersion"`
	// kind of the object: TerraformCluster, TerraformMachine or TerraformMachinePool.
	Kind string `json:"kind"`
	// name of the object, in the run's namespace.
	Name string `json:"name"`
}

// Run is one Terraform/OpenTofu run: a retained Job that captf created for a TerraformCluster,
// TerraformMachine or TerraformMachinePool. Its name, namespace, UID, labels,
// resourceVersion and creationTimestamp are the Job's. Runs are read-only and computed from
// the retained Jobs and the object's history limits; deleting the Job (pruning) removes the
// run.
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type Run struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the Job's: name, namespace, uid, resourceVersion, creationTimestamp and
	// labels (owner kind and name, cluster name, operation, attempt).
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what the run was created to do.
	// +optional
	Spec RunSpec `json:"spec,omitempty"`
	// status is how the run went, computed from the Job and the other retained runs of the
	// same object.
	// +optional
	Status RunStatus `json:"status,omitempty"`
}

// RunSpec is what a run was created to do.
type RunSpec struct {
	// target is the object the run belongs to.
	Target Target `json:"target"`
	// operation is what the run does: apply, plan, destroy, refresh, drift or restore. Empty
	// when the Job's operation label is missing or unknown.
	// +optional
	Operation string `json:"operation,omitempty"`
	// attempt is the run's attempt number within its operation: one more than the highest
	// attempt among the retained runs of the operation when it was created. 0 when the Job's
	// attempt label is missing or unreadable.
	// +optional
	Attempt int32 `json:"attempt,omitempty"`
	// inputsHash is the hash of the rendered inputs the run was created with (apply, plan,
	// restore).
	// +optional
	InputsHash string `json:"inputsHash,omitempty"`
	// driftRemediation is true on an apply that remediates detected drift.
	// +optional
	DriftRemediation bool `json:"driftRemediation,omitempty"`
	// approvedPlan is the plan hash an apply under applyPolicy Manual had to plan again; the
	// apply changes nothing unless its plan has this hash.
	// +optional
	ApprovedPlan string `json:"approvedPlan,omitempty"`
}

// RunStatus is how a run went.
type RunStatus struct {
	// phase is Pending until the Job starts, then Running, and when it ends one of
	// Succeeded, Failed, DeadlineExceeded, Interrupted, Blocked, PlanChanged or PlanUnreadable.
	// +optional
	Phase RunPhase `json:"phase,omitempty"`
	// startTime is when the Job started.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// completionTime is when the Job finished.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// duration is from start to finish, or to the time of reading while the run is running.
	// +optional
	Duration *metav1.Duration `json:"duration,omitempty"`
	// retryNumber is 1 plus the failures of the same operation that count toward backoff,
	// were created before this run and after the operation's last success before it. 1 means
	// the run was not a retry.
	// +optional
	RetryNumber int32 `json:"retryNumber,omitempty"`
	// countsTowardBackoff is true when the run's outcome counts as a failure: Failed,
	// DeadlineExceeded or PlanUnreadable. Interrupted, Blocked and PlanChanged runs wait for a
	// person or changed nothing, and do not count.
	// +optional
	CountsTowardBackoff bool `json:"countsTowardBackoff,omitempty"`
	// backoff is the wait before the operation is retried. It is set only on the newest
	// counted failure of the operation: the delay is min(1m × 2^(failures-1), 10m), 10m at once
	// when the failures reach the object's failedJobsHistoryLimit, counted from when this run
	// finished. A success of the operation ends the streak and removes the window.
	// +optional
	Backoff *Backoff `json:"backoff,omitempty"`
	// retention says why the run is still kept: Running, NewestSuccess, UnresolvedFailure,
	// WithinLimit, BeyondLimit (the next prune deletes it) or UnknownOperation.
	// +optional
	Retention Retention `json:"retention,omitempty"`
	// error is why the run failed, from the Job's result summary.
	// +optional
	Error *RunError `json:"error,omitempty"`
	// changes counts what an apply, destroy or refresh changed.
	// +optional
	Changes *Changes `json:"changes,omitempty"`
	// drift is what a drift check found.
	// +optional
	Drift *Drift `json:"drift,omitempty"`
	// resultUnreadable is true when the Job carries a result summary that could not be read;
	// error, changes and drift are then empty.
	// +optional
	ResultUnreadable bool `json:"resultUnreadable,omitempty"`
}

// Backoff is the wait after a streak of failures of one operation.
type Backoff struct {
	// failures is the length of the streak: the counted failures of the operation, newest
	// first, up to its last success. Pruning keeps at most failedJobsHistoryLimit failures, so
	// reaching the limit means "at least that many".
	Failures int32 `json:"failures"`
	// delay is the wait after the streak: min(1m × 2^(failures-1), 10m), and 10m when failures
	// reach the failed history limit.
	Delay metav1.Duration `json:"delay"`
	// retryAfter is when the newest counted failure finished, plus delay. The operation is not
	// retried before.
	RetryAfter metav1.Time `json:"retryAfter"`
	// active is true when the time of reading is before retryAfter.
	// +optional
	Active bool `json:"active,omitempty"`
}

// RunError is why a run failed.
type RunError struct {
	// kind of the error: image-layout, step, interrupted, blocked or plan-changed.
	// +optional
	Kind string `json:"kind,omitempty"`
	// step that failed, e.g. init, plan or apply.
	// +optional
	Step string `json:"step,omitempty"`
	// summary is a curated message of at most 512 bytes.
	// +optional
	Summary string `json:"summary,omitempty"`
}

// Changes counts what an apply, destroy or refresh changed.
type Changes struct {
	// add counts created resources.
	Add int32 `json:"add"`
	// change counts updated resources.
	Change int32 `json:"change"`
	// destroy counts deleted resources.
	Destroy int32 `json:"destroy"`
	// import counts imported resources.
	// +optional
	Import int32 `json:"import,omitempty"`
}

// Drift is what a drift check found.
type Drift struct {
	// detected is true when the infrastructure differs from the state.
	Detected bool `json:"detected"`
	// add counts resources a remediation would create.
	Add int32 `json:"add"`
	// change counts resources it would update.
	Change int32 `json:"change"`
	// destroy counts resources it would delete or replace.
	Destroy int32 `json:"destroy"`
	// resources lists at most 20 drifted resources.
	// +optional
	Resources []ResourceChange `json:"resources,omitempty"`
	// truncated is true when resources does not list every drifted resource.
	// +optional
	Truncated bool `json:"truncated,omitempty"`
}

// ResourceChange is one resource of a plan or of drift.
type ResourceChange struct {
	// address of the resource, e.g. module.net.aws_vpc.this.
	Address string `json:"address"`
	// actions planned for it, in plan order: create, update, delete, ...
	// +optional
	Actions []string `json:"actions,omitempty"`
}

// RunList is a list of runs.
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type RunList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata of the list; resourceVersion is the newest Job version the server has seen.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the runs.
	Items []Run `json:"items"`
}

// PlanSource says what a plan comes from.
type PlanSource string

// The plan sources.
const (
	// PlanSourcePlan: a plan Job under applyPolicy Manual; approving it writes
	// captf.io/approve-plan=<plan hash> on the TerraformCluster.
	PlanSourcePlan PlanSource = "Plan"
	// PlanSourceChangedApply: an approved apply that planned something else; its result carries
	// the new plan, which replaced the object's current plan and is approved like a plan Job's.
	PlanSourceChangedApply PlanSource = "ChangedApply"
	// PlanSourceBlockedApply: an apply that stopped before a destructive plan; approving it
	// writes captf.io/approve-destructive-plan=<inputs hash>, which approves the inputs, not an
	// exact plan.
	PlanSourceBlockedApply PlanSource = "BlockedApply"
)

// PlanPhase is the phase of a plan.
type PlanPhase string

// The phases of a plan.
const (
	// PlanPhasePlanning: the plan Job runs, or its result is not recorded yet.
	PlanPhasePlanning PlanPhase = "Planning"
	// PlanPhaseAwaitingApproval: the plan is the object's current one and not approved.
	PlanPhaseAwaitingApproval PlanPhase = "AwaitingApproval"
	// PlanPhaseApproved: the object's approval names the plan and no apply of it succeeded yet.
	PlanPhaseApproved PlanPhase = "Approved"
	// PlanPhaseApplied: an apply of the plan succeeded.
	PlanPhaseApplied PlanPhase = "Applied"
	// PlanPhaseSuperseded: the plan is not the object's current one any more.
	PlanPhaseSuperseded PlanPhase = "Superseded"
	// PlanPhaseChanged: the approved apply found a different plan, which replaced this one.
	PlanPhaseChanged PlanPhase = "Changed"
	// PlanPhaseFailed: the plan Job failed, or succeeded without a readable plan.
	PlanPhaseFailed PlanPhase = "Failed"
	// PlanPhaseUnverified: the signature of the plan's Job does not verify under the install's
	// run key, or the key is not known yet: someone other than the controller may have changed
	// what the plan shows, so it cannot be approved.
	PlanPhaseUnverified PlanPhase = "Unverified"
)

// Plan is a Terraform/OpenTofu plan waiting for, or past, a person's approval: one per retained
// plan Job, per apply whose approved plan changed, and per apply blocked before a destructive
// plan. Its name, namespace, UID, labels, resourceVersion and creationTimestamp are its Job's.
// Approve it by creating a PlanApproval on its approval subresource.
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type Plan struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the Job's.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says what the plan is for and where it comes from.
	// +optional
	Spec PlanSpec `json:"spec,omitempty"`
	// status is the plan's content and its phase.
	// +optional
	Status PlanStatus `json:"status,omitempty"`
}

// PlanSpec says what a plan is for and where it comes from.
type PlanSpec struct {
	// target is the object the plan would change.
	Target Target `json:"target"`
	// source is Plan (a plan Job under applyPolicy Manual), ChangedApply (an approved apply that
	// planned something else) or BlockedApply (an apply stopped before a destructive plan).
	Source PlanSource `json:"source"`
	// inputsHash is the hash of the rendered inputs the plan was made from.
	// +optional
	InputsHash string `json:"inputsHash,omitempty"`
}

// PlanStatus is a plan's content and phase.
type PlanStatus struct {
	// phase is Planning, AwaitingApproval, Approved, Applied, Superseded, Changed, Failed or
	// Unverified. Only a plan that is AwaitingApproval or Approved can be approved.
	// +optional
	Phase PlanPhase `json:"phase,omitempty"`
	// planHash is the plan's keyed p3: hash, when the run reported one.
	// +optional
	PlanHash string `json:"planHash,omitempty"`
	// approvalHash is the value an approval must quote in spec.planHash: the plan hash, or for
	// a blocked apply its inputs hash.
	// +optional
	ApprovalHash string `json:"approvalHash,omitempty"`
	// add counts resources the plan creates.
	// +optional
	Add int32 `json:"add,omitempty"`
	// change counts resources it updates in place.
	// +optional
	Change int32 `json:"change,omitempty"`
	// destroy counts resources it deletes or replaces.
	// +optional
	Destroy int32 `json:"destroy,omitempty"`
	// resources lists at most 50 planned changes with their actions.
	// +optional
	Resources []ResourceChange `json:"resources,omitempty"`
	// truncated is true when resources does not list every change.
	// +optional
	Truncated bool `json:"truncated,omitempty"`
	// destructive is true when a change deletes or replaces a resource.
	// +optional
	Destructive bool `json:"destructive,omitempty"`
	// approvedBy is the user whose approval names this plan.
	// +optional
	ApprovedBy string `json:"approvedBy,omitempty"`
	// approvedAt is when that approval was written.
	// +optional
	ApprovedAt *metav1.Time `json:"approvedAt,omitempty"`
	// resultUnreadable is true when the Job carries a result summary that could not be read.
	// +optional
	ResultUnreadable bool `json:"resultUnreadable,omitempty"`
}

// PlanList is a list of plans.
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type PlanList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata of the list; resourceVersion is the newest Job version the server has seen.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the plans.
	Items []Plan `json:"items"`
}

// PlanApproval approves a plan. Create it on the plan's approval subresource
// (POST .../plans/<name>/approval) with the plan's name and the hash you reviewed; the server
// then annotates the plan's object, captf.io/approve-plan=<plan hash> for a plan or
// captf.io/approve-destructive-plan=<inputs hash> for a blocked apply, with
// captf.io/approved-by=<you>. Approving needs create on plans/approval, not edit rights on
// the object. Nothing is stored: the response reports what was written.
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type PlanApproval struct {
	metav1.TypeMeta `json:",inline"`
	// metadata.name must be the plan's name, as in the URL, or empty.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec quotes what is approved.
	Spec PlanApprovalSpec `json:"spec"`
	// status reports what the approval wrote.
	// +optional
	Status PlanApprovalStatus `json:"status,omitempty"`
}

// PlanApprovalSpec quotes what is approved.
type PlanApprovalSpec struct {
	// planHash must equal the plan's status.approvalHash: its plan hash (p3:...), or for a
	// blocked apply its inputs hash. A different value is refused with 409 Conflict, so an
	// approval never applies to a plan its author did not review.
	PlanHash string `json:"planHash"`
}

// PlanApprovalStatus reports what an approval wrote.
type PlanApprovalStatus struct {
	// target is the object whose annotations were written.
	// +optional
	Target *Target `json:"target,omitempty"`
	// annotations are the annotations written on the target (or that would be written, on a
	// dry run).
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
	// approvedBy is the user the approval is recorded for.
	// +optional
	ApprovedBy string `json:"approvedBy,omitempty"`
	// approvedAt is when the approval was written.
	// +optional
	ApprovedAt *metav1.Time `json:"approvedAt,omitempty"`
	// message explains the outcome.
	// +optional
	Message string `json:"message,omitempty"`
}

package workspace

import (
	"errors"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/contract"
	"github.com/captf/captf/controller/decide"
	"github.com/captf/captf/controller/inputs"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/jobs"
)

// The setters below are the only code that writes conditions and status fields. They are pure:
// given what a pass learnt, they change the status in memory and nothing else, so each rule is a
// table row in status_test.go. Reads, writes to other objects and events stay with the callers.

// stamp is when and for which generation a pass writes conditions.
type stamp struct {
	generation int64
	now        time.Time
}

// set writes one condition. Ready is summarised once, from all of them, by setReady.
func (s stamp) set(conds *[]metav1.Condition, conditionType string, status metav1.ConditionStatus, reason, message string) {
	conditions.Set(conds, metav1.Condition{Type: conditionType, Status: status, Reason: reason, Message: message,
		ObservedGeneration: s.generation, LastTransitionTime: metav1.NewTime(s.now)})
}

// setReady summarises Ready from the conditions a pass wrote (conditions.SetReady): the runs
// and what they need until the object is provisioned, its infrastructure's health after.
func setReady(s *infrav1.WorkspaceStatus, at stamp, kind jobs.Kind, deleting bool) {
	conditions.SetReady(&s.Conditions, conditions.ReadyInputs{
		Provisioned:              s.IsProvisioned(),
		AppliesAfterProvisioning: kind == jobs.KindMachinePool,
		Deleting:                 deleting,
	}, at.generation, at.now)
}

// setOpCondition writes the condition op reports in.
func setOpCondition(s *infrav1.WorkspaceStatus, at stamp, op jobs.Op, status metav1.ConditionStatus, reason, message string) {
	at.set(&s.Conditions, conditionFor(op), status, reason, message)
}

// setJobStarted records a Job just started: status.activeJob, and a running condition only when
// the op has no verdict yet, since a running Job changes no verdict of an earlier one.
func setJobStarted(s *infrav1.WorkspaceStatus, at stamp, job string, op jobs.Op, attempt int32, why string) {
	s.ActiveJob = &infrav1.ActiveJob{Name: job, Operation: infrav1.Operation(op), Attempt: attempt, StartTime: ptr.To(metav1.NewTime(at.now))}
	if conditions.Get(s.Conditions, conditionFor(op)) == nil {
		setOpCondition(s, at, op, metav1.ConditionUnknown, runningReason(op), fmt.Sprintf("Job %s (%s, attempt %d) is running", job, why, attempt))
	}
}

// setRemediating says that a Job remediates the drift found.
func setRemediating(s *infrav1.WorkspaceStatus, at stamp, job string) {
	at.set(&s.Conditions, conditions.DriftDetected, metav1.ConditionTrue, conditions.ReasonDriftRemediating, "Job "+job+" remediates the drift")
}

// setStateReadable reports the state read in StateReadable, and the key a readable state is
// encrypted with in stateKeyID.
func setStateReadable(s *infrav1.WorkspaceStatus, at stamp, st state.State, err error) {
	switch {
	case err != nil:
		at.set(&s.Conditions, conditions.StateReadable, metav1.ConditionFalse, stateReason(err), err.Error())
	case !st.Exists:
		at.set(&s.Conditions, conditions.StateReadable, metav1.ConditionTrue, conditions.ReasonStateNotFound, "no state yet")
	default:
		at.set(&s.Conditions, conditions.StateReadable, metav1.ConditionTrue, conditions.ReasonStateRead, fmt.Sprintf("state serial %d with %d resources", st.Serial, st.Resources))
	}
	if err == nil {
		s.StateKeyID = st.KeyID
	}
}

// setStateLocked reports a state lock that is not stale; the Job still starts and waits for it.
func setStateLocked(s *infrav1.WorkspaceStatus, at stamp, heldBy string) {
	at.set(&s.Conditions, conditions.StateReadable, metav1.ConditionFalse, conditions.ReasonStateLocked,
		"the state is locked ("+heldBy+"); the next Job waits up to lockTimeoutSeconds for it")
}

// setInputsProblem reports inputs that cannot be rendered.
func setInputsProblem(s *infrav1.WorkspaceStatus, at stamp, err error) {
	reason := conditions.ReasonInputsInvalid
	var tooLarge *inputs.TooLargeError
	if errors.As(err, &tooLarge) {
		reason = conditions.ReasonInputsTooLarge
	}
	at.set(&s.Conditions, conditions.ApplyJobSucceeded, metav1.ConditionFalse, reason, err.Error())
}

// setRestoreProblem reports a captf.io/restore-state that names no usable backup.
func setRestoreProblem(s *infrav1.WorkspaceStatus, at stamp, problem string) {
	at.set(&s.Conditions, conditions.RestoreJobSucceeded, metav1.ConditionFalse, conditions.ReasonRestoreBackupNotFound, problem)
}

// setRunnerRBAC reports whether Jobs may run under the configured ServiceAccount; problem says
// why not, empty when they may.
func setRunnerRBAC(s *infrav1.WorkspaceStatus, at stamp, serviceAccount, problem string) {
	if problem != "" {
		at.set(&s.Conditions, conditions.RunnerRBACReady, metav1.ConditionFalse, conditions.ReasonServiceAccountNotOptedIn, problem)
		return
	}
	at.set(&s.Conditions, conditions.RunnerRBACReady, metav1.ConditionTrue, conditions.ReasonRunnerReady, "Jobs run under ServiceAccount "+serviceAccount)
}

// setInterruptedApply reports an apply Job that disappeared while it ran.
func setInterruptedApply(s *infrav1.WorkspaceStatus, at stamp, job string) {
	at.set(&s.Conditions, conditions.ApplyJobSucceeded, metav1.ConditionFalse, conditions.ReasonApplyFailed, InterruptedApplyMessage(job))
}

// setWaiting says why a due operation waits for a person: a plan for approval, or a blocked
// destructive apply. A condition that already says so for the same plan is kept as it is.
func setWaiting(s *infrav1.WorkspaceStatus, at stamp, reason string, plan *infrav1.PlanPreview, namespace string) {
	current := conditions.Get(s.Conditions, conditions.ApplyJobSucceeded)
	switch reason {
	case decide.PlanAwaitingApproval:
		if plan == nil {
			return
		}
		if current != nil && current.Reason == conditions.ReasonPlanChanged && strings.Contains(current.Message, plan.PlanHash) {
			return // still the plan the changed apply met; keep saying so
		}
		at.set(&s.Conditions, conditions.ApplyJobSucceeded, metav1.ConditionUnknown, conditions.ReasonPlanAwaitingApproval, approveMessage(namespace, plan))
	case decide.DestructivePlanBlocked:
		if current != nil && current.Reason == conditions.ReasonDestructivePlanBlocked {
			return
		}
		at.set(&s.Conditions, conditions.ApplyJobSucceeded, metav1.ConditionFalse, conditions.ReasonDestructivePlanBlocked,
			"the newest apply of these inputs stopped before a destructive plan; approve its plan with kubectl captf approve, or through plans/approval of runs.captf.io/v1alpha1")
	}
}

// setDriftPending keeps DriftDetected True as DriftPending while found drift waits for its
// remediation, e.g. at the remediation cap. Only passes without an active Job call it, so a
// remediation that ran and failed goes back to pending.
func setDriftPending(s *infrav1.WorkspaceStatus, at stamp, in decide.Input) {
	if in.Drift.Action != infrav1.DriftActionRemediate || !decide.DriftFound(in.Jobs) {
		return
	}
	msg := "drift waits for remediation"
	if !jobs.RemediationAllowed(in.Jobs, in.LastDriftCheck, in.Limits) {
		msg = fmt.Sprintf("remediation stopped after %d failed applies; the next successful drift check resets the count",
			jobs.RemediationFailures(in.Jobs, in.LastDriftCheck))
	}
	at.set(&s.Conditions, conditions.DriftDetected, metav1.ConditionTrue, conditions.ReasonDriftPending, msg)
}

// bookedRun is what bookkeeping learnt of one finished Job.
type bookedRun struct {
	job     *batchv1.Job
	outcome jobs.Outcome
	summary jobs.Summary
	// finished is when it finished (the pass's time when the Job records none).
	finished time.Time
}

// describe is the condition message of a booked Job.
func (r bookedRun) describe() string {
	msg := fmt.Sprintf("Job %s: %s", r.job.Name, strings.ToLower(string(r.outcome)))
	if e := r.summary.Error; e != nil {
		if e.Step != "" {
			msg += fmt.Sprintf(" in step %s", e.Step)
		}
		if e.Summary != "" {
			msg += ": " + e.Summary
		}
	}
	return msg
}

// setLastRun makes the booked Job status.lastRun unless a newer one is there already.
func setLastRun(s *infrav1.WorkspaceStatus, r bookedRun) {
	finished := metav1.NewTime(r.finished)
	last := &infrav1.LastRun{Job: r.job.Name, Operation: infrav1.Operation(jobs.OpOf(r.job)), Outcome: string(r.outcome), FinishedAt: &finished}
	if e := r.summary.Error; e != nil {
		last.Error = &infrav1.RunError{Kind: string(e.Kind), Step: e.Step, Summary: e.Summary}
	}
	if d := r.summary.Drift; d != nil {
		last.Drift = &infrav1.DriftSummary{Add: int32(d.Add), Change: int32(d.Change), Destroy: int32(d.Destroy)}
		for _, res := range d.Resources {
			last.Drift.Resources = append(last.Drift.Resources, res.Address)
		}
	}
	if s.LastRun == nil || s.LastRun.FinishedAt == nil || !finished.Before(s.LastRun.FinishedAt) {
		s.LastRun = last
	}
}

// setBooked writes a booked Job's verdict: status.lastRun, the op's condition, the times of the
// last refresh and drift check, provisioning, the drift found or resolved and, for plans and
// changed plans, status.plan (plan is nil for kinds without plans). Whether a Job's verdict is
// news — for events — is for the caller to tell from the status before.
func setBooked(s *infrav1.WorkspaceStatus, plan **infrav1.PlanPreview, at stamp, r bookedRun, drift infrav1.DriftSpec, namespace string) {
	setLastRun(s, r)
	op := jobs.OpOf(r.job)
	switch {
	case r.outcome.Succeeded():
		setSucceeded(s, plan, at, r, drift, namespace)
	case r.outcome == jobs.OutcomeInterrupted:
		setOpCondition(s, at, op, metav1.ConditionUnknown, conditions.ReasonJobInterrupted, r.describe())
	case r.outcome == jobs.OutcomePlanChanged:
		if preview := setPlan(plan, r); preview != nil {
			at.set(&s.Conditions, conditions.ApplyJobSucceeded, metav1.ConditionUnknown, conditions.ReasonPlanChanged,
				"the approved plan no longer matched; the new "+approveMessage(namespace, preview))
		}
	case r.outcome == jobs.OutcomeBlocked:
		at.set(&s.Conditions, conditions.ApplyJobSucceeded, metav1.ConditionFalse, conditions.ReasonDestructivePlanBlocked, blockedMessage(r.job, r.summary.Plan))
	default:
		setOpCondition(s, at, op, metav1.ConditionFalse, failureReason(op, r.outcome), r.describe())
	}
}

// setSucceeded writes the verdict of a successful Job, by op.
func setSucceeded(s *infrav1.WorkspaceStatus, plan **infrav1.PlanPreview, at stamp, r bookedRun, drift infrav1.DriftSpec, namespace string) {
	finished := metav1.NewTime(r.finished)
	message := r.describe()
	switch jobs.OpOf(r.job) {
	case jobs.OpPlan:
		if preview := setPlan(plan, r); preview != nil {
			at.set(&s.Conditions, conditions.ApplyJobSucceeded, metav1.ConditionUnknown, conditions.ReasonPlanAwaitingApproval, approveMessage(namespace, preview))
		}
	case jobs.OpApply:
		at.set(&s.Conditions, conditions.ApplyJobSucceeded, metav1.ConditionTrue, conditions.ReasonApplySucceeded, message)
		if conditions.IsTrue(s.Conditions, conditions.DriftDetected) {
			at.set(&s.Conditions, conditions.DriftDetected, metav1.ConditionFalse, conditions.ReasonNoDrift, "resolved by Job "+r.job.Name)
		}
		if hash := r.job.Annotations[jobs.AnnotationApprovedPlan]; hash != "" && plan != nil {
			*plan = nil // the approved plan is applied
		}
	case jobs.OpDestroy:
		at.set(&s.Conditions, conditions.ApplyJobSucceeded, metav1.ConditionTrue, conditions.ReasonDestroySucceeded, message)
	case jobs.OpRestore:
		at.set(&s.Conditions, conditions.RestoreJobSucceeded, metav1.ConditionTrue, conditions.ReasonStateRestored, message)
	case jobs.OpRefresh:
		s.LastRefresh = &finished
		at.set(&s.Conditions, conditions.DriftJobSucceeded, metav1.ConditionTrue, conditions.ReasonDriftChecked, message)
	case jobs.OpDrift:
		s.LastDriftCheck = &finished
		at.set(&s.Conditions, conditions.DriftJobSucceeded, metav1.ConditionTrue, conditions.ReasonDriftChecked, message)
		setDriftChecked(s, at, r.summary.Drift, drift)
	}
}

// setDriftChecked writes what a successful drift check found into DriftDetected.
func setDriftChecked(s *infrav1.WorkspaceStatus, at stamp, found *jobs.DriftSummary, policy infrav1.DriftSpec) {
	if found == nil || !found.Detected {
		at.set(&s.Conditions, conditions.DriftDetected, metav1.ConditionFalse, conditions.ReasonNoDrift, "the infrastructure matches the state")
		return
	}
	reason := conditions.ReasonDriftReported
	if policy.Action == infrav1.DriftActionRemediate {
		reason = conditions.ReasonDriftPending
	}
	at.set(&s.Conditions, conditions.DriftDetected, metav1.ConditionTrue, reason,
		fmt.Sprintf("%d to add, %d to change, %d to destroy", found.Add, found.Change, found.Destroy))
}

// setPlan writes a plan Job's plan, or the new plan an approved apply met, into status.plan.
func setPlan(plan **infrav1.PlanPreview, r bookedRun) *infrav1.PlanPreview {
	p := r.summary.Plan
	if plan == nil || p == nil || p.Hash == "" {
		return nil
	}
	preview := &infrav1.PlanPreview{
		InputsHash: r.job.Annotations[jobs.AnnotationInputsHash], Job: r.job.Name, PlanHash: p.Hash,
		Add: int32(p.Add), Change: int32(p.Change), Destroy: int32(p.Destroy),
		Truncated: p.Truncated, CreatedAt: &metav1.Time{Time: r.finished},
	}
	for _, res := range p.Resources {
		preview.Resources = append(preview.Resources, fmt.Sprintf("%s (%s)", res.Address, strings.Join(res.Actions, ", ")))
	}
	*plan = preview
	return preview
}

// setSource shows the image digest the newest successful apply pinned; none clears it.
func setSource(s *infrav1.WorkspaceStatus, image, digest string) {
	s.Source = nil
	if digest != "" {
		s.Source = &infrav1.SourceStatus{Image: image, Digest: digest}
	}
}

// maxReconcileRequest is the longest captf.io/reconcile-requested-at value the status
// records (status.lastHandledReconcileAt's maxLength): a longer one, which kubectl captf
// reconcile never writes, would make the whole status write fail.
const maxReconcileRequest = 64

// setReconcileHandled records request, the object's captf.io/reconcile-requested-at value, as
// handled by this pass.
func setReconcileHandled(s *infrav1.WorkspaceStatus, request string) {
	if request != "" && len(request) <= maxReconcileRequest {
		s.LastHandledReconcileAt = request
	}
}

// setPaused reports whether the object or its Cluster is paused.
func setPaused(s *infrav1.WorkspaceStatus, at stamp, pause Pause) {
	if pause.Paused {
		at.set(&s.Conditions, conditions.Paused, metav1.ConditionTrue, conditions.ReasonPaused, pause.Why)
		return
	}
	at.set(&s.Conditions, conditions.Paused, metav1.ConditionFalse, conditions.ReasonNotPaused, "neither the object nor its Cluster is paused")
}

// setDeletionBlocked reports whether a deleted cluster waits for its machines and pools;
// dependents describes them, "" for none.
func setDeletionBlocked(s *infrav1.WorkspaceStatus, at stamp, dependents string) {
	if dependents != "" {
		at.set(&s.Conditions, conditions.DeletionBlocked, metav1.ConditionTrue, conditions.ReasonDependentsExist, "waiting for "+dependents+" to be deleted first")
		return
	}
	at.set(&s.Conditions, conditions.DeletionBlocked, metav1.ConditionFalse, conditions.ReasonNotBlocked, "no machine or pool of this cluster remains")
}

// setDependencies reports what Cluster API provides for a run: the owner, its back-references,
// the cluster's infrastructure and exports and the bootstrap data.
func setDependencies(s *infrav1.WorkspaceStatus, at stamp, d Dependencies) {
	at.set(&s.Conditions, conditions.DependenciesReady, d.Status, d.Reason, d.Message)
}

// setIdentity reports whether the object's identity lends it credentials; an object without
// an identity carries neither identity condition.
func setIdentity(s *infrav1.WorkspaceStatus, at stamp, c Credentials) {
	if c.Identity == "" {
		apimeta.RemoveStatusCondition(&s.Conditions, conditions.IdentityAllowed)
		apimeta.RemoveStatusCondition(&s.Conditions, conditions.CredentialsMirrored)
		return
	}
	at.set(&s.Conditions, conditions.IdentityAllowed, c.Status, c.Reason, c.Message)
}

// setMirror reports the object's copy of its identity's credentials; problem says why it
// cannot be written.
func setMirror(s *infrav1.WorkspaceStatus, at stamp, mirror, problem string) {
	if problem != "" {
		at.set(&s.Conditions, conditions.CredentialsMirrored, metav1.ConditionFalse, conditions.ReasonMirrorFailed, problem)
		return
	}
	at.set(&s.Conditions, conditions.CredentialsMirrored, metav1.ConditionTrue, conditions.ReasonMirrored, "the Jobs read the credentials from Secret "+mirror)
}

// setEndpointAvailable reports whether a cluster has a control plane endpoint (known says so):
// True once it has one; False only once it is provisioned without one; unset before.
func setEndpointAvailable(s *infrav1.WorkspaceStatus, at stamp, known bool) {
	switch {
	case known:
		at.set(&s.Conditions, conditions.EndpointAvailable, metav1.ConditionTrue, conditions.ReasonEndpointAvailable, "the cluster has a control plane endpoint")
	case s.IsProvisioned():
		at.set(&s.Conditions, conditions.EndpointAvailable, metav1.ConditionFalse, conditions.ReasonWaitingForEndpoint,
			"provisioned without a control plane endpoint: none in spec.controlPlaneEndpoint, the module's control_plane_endpoint output or the Cluster's")
	}
}

// setAutoscaling reports a pool's cluster autoscaler bounds: annotations that cannot be used
// are said so (the pool applies without autoscaling). Never counts toward Ready.
func setAutoscaling(s *infrav1.WorkspaceStatus, at stamp, a contract.Autoscaling, problem string) {
	switch {
	case problem != "":
		at.set(&s.Conditions, conditions.AutoscalingActive, metav1.ConditionFalse, conditions.ReasonAutoscalingAnnotationsInvalid, problem+"; the pool applies without autoscaling")
	case a.Enabled:
		at.set(&s.Conditions, conditions.AutoscalingActive, metav1.ConditionTrue, conditions.ReasonReplicasFollowMachinePool,
			fmt.Sprintf("the module gets the MachinePool's spec.replicas, which the cluster autoscaler sets, within its bounds %d..%d as its replicas", a.Min, a.Max))
	default:
		at.set(&s.Conditions, conditions.AutoscalingActive, metav1.ConditionFalse, conditions.ReasonAutoscalingDisabled, "the MachinePool carries no cluster autoscaler annotations")
	}
}

// setHealthSample counts a machine's health reading for remediation, once per Job that read it
// (the newest successful apply or refresh) and only once provisioned: an unhealthy, degraded or
// stopped reading adds one, a healthy one resets the count, any other leaves it.
func setHealthSample(s *infrav1.TerraformMachineStatus, job string, reading healthReading) {
	if job == "" || job == s.LastHealthSample || !s.IsProvisioned() {
		return
	}
	s.LastHealthSample = job
	switch reading {
	case readingHealthy:
		s.UnhealthySamples = 0
	case readingUnhealthy:
		s.UnhealthySamples++
	}
}

// setProviderIDMissing reports a provisioned machine whose module returned no provider ID in the
// health reading of Job sample: Unknown/ProviderIDMissing at the first such reading, and
// False/InstanceTerminated (the terminal signal) once a later reading still finds none. prev is
// InfrastructureHealthy as it was before this pass read the state.
func setProviderIDMissing(s *infrav1.WorkspaceStatus, at stamp, prev *metav1.Condition, sample string) {
	tag := "(reading of Job " + sample + ")"
	switch {
	case prev != nil && prev.Reason == conditions.ReasonInstanceTerminated:
		at.set(&s.Conditions, conditions.InfrastructureHealthy, metav1.ConditionFalse, conditions.ReasonInstanceTerminated, prev.Message)
	case prev != nil && prev.Reason == conditions.ReasonProviderIDMissing && !strings.HasSuffix(prev.Message, tag):
		at.set(&s.Conditions, conditions.InfrastructureHealthy, metav1.ConditionFalse, conditions.ReasonInstanceTerminated,
			"the module returned no provider ID in two health readings: the machine is gone "+tag)
	case prev != nil && prev.Reason == conditions.ReasonProviderIDMissing:
		at.set(&s.Conditions, conditions.InfrastructureHealthy, metav1.ConditionUnknown, conditions.ReasonProviderIDMissing, prev.Message)
	default:
		at.set(&s.Conditions, conditions.InfrastructureHealthy, metav1.ConditionUnknown, conditions.ReasonProviderIDMissing,
			"the module returned no provider ID for the provisioned machine "+tag)
	}
}

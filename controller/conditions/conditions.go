// Package conditions holds the condition types and reasons of the captf kinds and the pure
// setters that write them, including the Ready summary.
package conditions

import (
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types.
const (
	// ApplyJobSucceeded reports the newest apply, plan or destroy.
	ApplyJobSucceeded = "ApplyJobSucceeded"
	// DriftJobSucceeded reports the newest refresh or drift check.
	DriftJobSucceeded = "DriftJobSucceeded"
	// DriftDetected is True while the newest drift check found drift (negative polarity).
	DriftDetected = "DriftDetected"
	// StateReadable reports whether the state could be read.
	StateReadable = "StateReadable"
	// RestoreJobSucceeded reports the newest restore of a state backup.
	RestoreJobSucceeded = "RestoreJobSucceeded"
	// RunnerRBACReady reports whether the Jobs' ServiceAccount may run them.
	RunnerRBACReady = "RunnerRBACReady"
	// InfrastructureHealthy reports the module's health output.
	InfrastructureHealthy = "InfrastructureHealthy"
	// Paused is True while the object or its Cluster is paused: Jobs are booked, none starts.
	Paused = "Paused"
	// DeletionBlocked is True while a deleted cluster waits for its machines and pools
	// (negative polarity).
	DeletionBlocked = "DeletionBlocked"
	// OutputsValid reports whether the module's outputs in the state meet the contract of the
	// object's role.
	OutputsValid = "OutputsValid"
	// DependenciesReady reports whether what a run needs from Cluster API is there: the owner,
	// its back-references, the cluster's infrastructure and exports, the bootstrap data.
	DependenciesReady = "DependenciesReady"
	// AutoscalingActive reports whether a pool's MachinePool carries usable cluster autoscaler
	// bounds. Never counts toward Ready.
	AutoscalingActive = "AutoscalingActive"
	// EndpointAvailable reports whether a cluster has a control plane endpoint: its own, its
	// module's or its Cluster's. Never counts toward Ready.
	EndpointAvailable = "EndpointAvailable"
	// IdentityAllowed reports whether the object's TerraformClusterIdentity lends its namespace
	// credentials; set only for an object with an identity.
	IdentityAllowed = "IdentityAllowed"
	// CredentialsMirrored reports the object's copy of its identity's credentials.
	CredentialsMirrored = "CredentialsMirrored"
	// Ready summarises the others.
	Ready = "Ready"
)

// Reasons, each constant named after its value. The condition a reason is used with is noted
// where it is not plain from the name.
const (
	// ApplyJobSucceeded (apply, plan, destroy).
	ReasonApplySucceeded           = "ApplySucceeded"
	ReasonApplyFailed              = "ApplyFailed"
	ReasonApplyRunning             = "ApplyRunning"
	ReasonDestroySucceeded         = "DestroySucceeded"
	ReasonDestroyFailed            = "DestroyFailed"
	ReasonDestroyRunning           = "DestroyRunning"
	ReasonJobDeadlineExceeded      = "JobDeadlineExceeded"
	ReasonJobInterrupted           = "JobInterrupted"
	ReasonJobRejected              = "JobRejected"
	ReasonInputsTooLarge           = "InputsTooLarge"
	ReasonInputsInvalid            = "InputsInvalid"
	ReasonNoApplyYet               = "NoApplyYet"
	ReasonWaitingForRunLease       = "WaitingForRunLease"
	ReasonPlanAwaitingApproval     = "PlanAwaitingApproval"
	ReasonPlanChanged              = "PlanChanged"
	ReasonDestructivePlanBlocked   = "DestructivePlanBlocked"
	ReasonJobNameTaken             = "JobNameTaken"
	ReasonPlanKeyNotOwned          = "PlanKeyNotOwned"
	ReasonPlanDigestUnknown        = "PlanDigestUnknown"
	ReasonApprovalUnguarded        = "ApprovalUnguarded"
	ReasonDurableInputsMissing     = "DurableInputsMissing"
	ReasonDurableInputsTampered    = "DurableInputsTampered"
	ReasonServiceAccountNotOptedIn = "ServiceAccountNotOptedIn"
	ReasonCLIConfigNotFound        = "CLIConfigNotFound"
	ReasonEnvSourceNotOptedIn      = "EnvSourceNotOptedIn"
	ReasonImageNotAllowed          = "ImageNotAllowed"
	ReasonRunnerReady              = "RunnerReady"

	// DriftJobSucceeded (refresh, drift) and DriftDetected.
	ReasonDriftChecked             = "DriftChecked"
	ReasonDriftJobFailed           = "DriftJobFailed"
	ReasonDriftJobDeadlineExceeded = "DriftJobDeadlineExceeded"
	ReasonDriftJobRunning          = "DriftJobRunning"
	ReasonDriftNotChecked          = "DriftNotChecked"
	ReasonNoDrift                  = "NoDrift"
	ReasonDriftReported            = "DriftReported"
	ReasonDriftPending             = "DriftPending"
	ReasonDriftRemediating         = "DriftRemediating"

	// StateReadable.
	ReasonStateRead        = "StateRead"
	ReasonStateNotFound    = "StateNotFound"
	ReasonStateCorrupt     = "StateCorrupt"
	ReasonStateEncrypted   = "StateEncrypted"
	ReasonStateUnsupported = "StateUnsupported"
	ReasonStateUnreadable  = "StateUnreadable"
	ReasonStateLocked      = "StateLocked"
	// ReasonStateLost: the state is missing although an apply once succeeded (captf.io/applied).
	ReasonStateLost = "StateLost"

	// RestoreJobSucceeded.
	ReasonStateRestored         = "StateRestored"
	ReasonRestoreFailed         = "RestoreFailed"
	ReasonRestoreBackupNotFound = "RestoreBackupNotFound"

	// OutputsValid, in order of precedence: the first that applies is reported.
	ReasonOutputsMissing        = "OutputsMissing"
	ReasonOutputsInvalid        = "OutputsInvalid"
	ReasonFailureDomainMismatch = "FailureDomainMismatch"
	ReasonProviderIDChanged     = "ProviderIDChanged"
	ReasonOutputsPending        = "OutputsPending"
	ReasonInstancesTruncated    = "InstancesTruncated"
	ReasonOutputsValid          = "OutputsValid"

	// InfrastructureHealthy, from the module's health output.
	ReasonHealthy            = "Healthy"
	ReasonInstancePending    = "InstancePending"
	ReasonInstanceUnhealthy  = "InstanceUnhealthy"
	ReasonInstanceDegraded   = "InstanceDegraded"
	ReasonInstanceStopped    = "InstanceStopped"
	ReasonInstanceTerminated = "InstanceTerminated"
	ReasonHealthUnknown      = "HealthUnknown"

	// Paused.
	ReasonPaused    = "Paused"
	ReasonNotPaused = "NotPaused"

	// DeletionBlocked.
	ReasonDependentsExist = "DependentsExist"
	ReasonNotBlocked      = "NotBlocked"

	// DependenciesReady. Waits are Unknown; the reasons before them False.
	ReasonDependenciesReady               = "DependenciesReady"
	ReasonOwnerNotFound                   = "OwnerNotFound"
	ReasonWaitingForOwnerMachine          = "WaitingForOwnerMachine"
	ReasonWaitingForOwnerMachinePool      = "WaitingForOwnerMachinePool"
	ReasonClusterNotTerraform             = "ClusterNotTerraform"
	ReasonOwnerMismatch                   = "OwnerMismatch"
	ReasonVariablesSourceNotFound         = "VariablesSourceNotFound"
	ReasonVariablesInvalid                = "VariablesInvalid"
	ReasonBootstrapDataRefused            = "BootstrapDataRefused"
	ReasonWaitingForOwner                 = "WaitingForOwner"
	ReasonWaitingForClusterInfrastructure = "WaitingForClusterInfrastructure"
	ReasonWaitingForClusterExports        = "WaitingForClusterExports"
	ReasonWaitingForBootstrapData         = "WaitingForBootstrapData"

	// AutoscalingActive.
	ReasonReplicasManagedByModule       = "ReplicasManagedByModule"
	ReasonAutoscalingDisabled           = "AutoscalingDisabled"
	ReasonAutoscalingAnnotationsInvalid = "AutoscalingAnnotationsInvalid"

	// EndpointAvailable.
	ReasonEndpointAvailable  = "EndpointAvailable"
	ReasonWaitingForEndpoint = "WaitingForEndpoint"

	// IdentityAllowed.
	ReasonIdentityAllowed     = "IdentityAllowed"
	ReasonIdentityNotFound    = "IdentityNotFound"
	ReasonNamespaceNotAllowed = "NamespaceNotAllowed"
	ReasonSecretNotFound      = "SecretNotFound"
	// ReasonSecretNotInControllerNamespace: the identity names a Secret outside the
	// controller's namespace, which the controller never lends.
	ReasonSecretNotInControllerNamespace = "SecretNotInControllerNamespace"

	// Ready of a TerraformClusterIdentity (SecretNotFound and SecretNotInControllerNamespace
	// also say why IdentityAllowed is False).
	ReasonSecretFound = "SecretFound"

	// CredentialsMirrored.
	ReasonMirrored     = "Mirrored"
	ReasonMirrorFailed = "MirrorFailed"

	// Ready.
	ReasonReady    = "Ready"
	ReasonNotReady = "NotReady"
)

// Set writes a condition; its transition time (c.LastTransitionTime, the time of the write)
// moves only when its status changes.
func Set(conds *[]metav1.Condition, c metav1.Condition) {
	apimeta.SetStatusCondition(conds, c)
}

// Get returns a condition, or nil.
func Get(conds []metav1.Condition, conditionType string) *metav1.Condition {
	return apimeta.FindStatusCondition(conds, conditionType)
}

// AwaitingApproval reports whether ApplyJobSucceeded says that a plan waits for a person's
// approval, and since when. Both PlanAwaitingApproval and PlanChanged (the approved plan no
// longer matched and a new one waits) count. since is the condition's lastTransitionTime, which
// moves only with its status: a plan that replaces a waiting one keeps the wait of the first.
func AwaitingApproval(conds []metav1.Condition) (since time.Time, waiting bool) {
	c := Get(conds, ApplyJobSucceeded)
	if c == nil || c.Status != metav1.ConditionUnknown {
		return time.Time{}, false
	}
	if c.Reason != ReasonPlanAwaitingApproval && c.Reason != ReasonPlanChanged {
		return time.Time{}, false
	}
	return c.LastTransitionTime.Time, true
}

// IsTrue reports whether a condition is True.
func IsTrue(conds []metav1.Condition, conditionType string) bool {
	return apimeta.IsStatusConditionTrue(conds, conditionType)
}

// SetReady summarises: False when an apply failed, the state cannot be read, Cluster API's
// objects are not as they must be or no Job may run under the configured ServiceAccount,
// Unknown while a run waits for Cluster API, True when the
// newest apply succeeded, Unknown otherwise. Waits are Unknown, so they never make Ready False.
func SetReady(conds *[]metav1.Condition, generation int64, now time.Time) {
	apply := Get(*conds, ApplyJobSucceeded)
	stateCond := Get(*conds, StateReadable)
	runner := Get(*conds, RunnerRBACReady)
	deps := Get(*conds, DependenciesReady)
	identity := Get(*conds, IdentityAllowed)
	mirror := Get(*conds, CredentialsMirrored)
	switch {
	case deps != nil && deps.Status == metav1.ConditionFalse:
		Set(conds, ready(metav1.ConditionFalse, deps.Reason, deps.Message, generation, now))
	case identity != nil && identity.Status == metav1.ConditionFalse:
		Set(conds, ready(metav1.ConditionFalse, identity.Reason, identity.Message, generation, now))
	case mirror != nil && mirror.Status == metav1.ConditionFalse:
		Set(conds, ready(metav1.ConditionFalse, mirror.Reason, mirror.Message, generation, now))
	case stateCond != nil && stateCond.Status == metav1.ConditionFalse:
		Set(conds, ready(metav1.ConditionFalse, stateCond.Reason, stateCond.Message, generation, now))
	case runner != nil && runner.Status == metav1.ConditionFalse:
		Set(conds, ready(metav1.ConditionFalse, runner.Reason, runner.Message, generation, now))
	case deps != nil && deps.Status == metav1.ConditionUnknown && (apply == nil || apply.Status != metav1.ConditionTrue):
		// A wait keeps an object that never applied Unknown; one that did stays as it was.
		Set(conds, ready(metav1.ConditionUnknown, deps.Reason, deps.Message, generation, now))
	case apply == nil:
		Set(conds, ready(metav1.ConditionUnknown, ReasonNoApplyYet, "no apply has finished yet", generation, now))
	case apply.Status == metav1.ConditionTrue:
		Set(conds, ready(metav1.ConditionTrue, ReasonReady, apply.Message, generation, now))
	default:
		Set(conds, ready(apply.Status, apply.Reason, apply.Message, generation, now))
	}
}

func ready(status metav1.ConditionStatus, reason, message string, generation int64, now time.Time) metav1.Condition {
	return metav1.Condition{Type: Ready, Status: status, Reason: reason, Message: message, ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(now)}
}

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
	// ReasonStateKeysNotFound: spec.stateEncryption names a Secret that cannot be used.
	ReasonStateKeysNotFound   = "StateKeysNotFound"
	ReasonEnvSourceNotOptedIn = "EnvSourceNotOptedIn"
	ReasonImageNotAllowed     = "ImageNotAllowed"
	ReasonRunnerReady         = "RunnerReady"

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
	ReasonStateRead      = "StateRead"
	ReasonStateNotFound  = "StateNotFound"
	ReasonStateCorrupt   = "StateCorrupt"
	ReasonStateEncrypted = "StateEncrypted"
	// ReasonStateKeyMismatch: the state is encrypted under a key id the controller has, and
	// does not open with its passphrase.
	ReasonStateKeyMismatch = "StateKeyMismatch"
	// ReasonStateNotEncrypted: the state is in the clear although it was last read encrypted.
	ReasonStateNotEncrypted = "StateNotEncrypted"
	ReasonStateUnsupported  = "StateUnsupported"
	ReasonStateUnreadable   = "StateUnreadable"
	ReasonStateLocked       = "StateLocked"
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
	// ReasonProviderIDMissing: a provisioned machine's module returned no provider ID in one
	// health reading; a later reading without one is InstanceTerminated.
	ReasonProviderIDMissing = "ProviderIDMissing"

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
	ReasonReplicasFollowMachinePool     = "ReplicasFollowMachinePool"
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
	ReasonDeleting = "Deleting"
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

// ReadyInputs is what the Ready summary reads besides the conditions.
type ReadyInputs struct {
	// Provisioned is status.initialization.provisioned. From then on Ready follows the
	// infrastructure's health, not the runs: Cluster API mirrors Ready into the Machine's and
	// the Cluster's InfrastructureReady, which MachineHealthChecks read, so a failed re-apply,
	// a plan awaiting approval or a state lock must not make healthy infrastructure look broken.
	Provisioned bool
	// AppliesAfterProvisioning keeps a failed apply an input once provisioned: a pool's
	// applies change its members.
	AppliesAfterProvisioning bool
	// Deleting: the object is being deleted.
	Deleting bool
}

// SetReady summarises the object's readiness in Ready. Waits are Unknown, never False.
//
// Until the object is provisioned, Ready is False when Cluster API's objects are not as they
// must be, the identity lends no credentials, the state cannot be read, no Job may run under
// the configured ServiceAccount, the newest apply failed, the outputs break the contract or the
// infrastructure reports a bad state; Unknown while something is awaited; True once all hold.
// Once provisioned, Ready is the infrastructure's health (InfrastructureHealthy), and for a
// pool also False after a failed apply. A deleting object is not Ready.
func SetReady(conds *[]metav1.Condition, in ReadyInputs, generation int64, now time.Time) {
	status, reason, message := readiness(*conds, in)
	Set(conds, ready(status, reason, message, generation, now))
}

// readiness returns Ready's status, reason and message; see SetReady.
func readiness(conds []metav1.Condition, in ReadyInputs) (metav1.ConditionStatus, string, string) {
	if in.Deleting {
		return metav1.ConditionFalse, ReasonDeleting, "the object is being deleted"
	}
	if in.Provisioned {
		return provisionedReadiness(conds, in)
	}
	apply := Get(conds, ApplyJobSucceeded)
	deps := Get(conds, DependenciesReady)
	// The first input that is False decides; a lock is a wait, not a fault.
	for _, c := range []*metav1.Condition{deps, Get(conds, IdentityAllowed), Get(conds, CredentialsMirrored), Get(conds, StateReadable), Get(conds, RunnerRBACReady)} {
		if c != nil && c.Status == metav1.ConditionFalse && c.Reason != ReasonStateLocked {
			return metav1.ConditionFalse, c.Reason, c.Message
		}
	}
	if state := Get(conds, StateReadable); state != nil && state.Reason == ReasonStateLocked && state.Status == metav1.ConditionFalse {
		return metav1.ConditionUnknown, state.Reason, state.Message
	}
	switch {
	case deps != nil && deps.Status == metav1.ConditionUnknown && (apply == nil || apply.Status != metav1.ConditionTrue):
		// A wait keeps an object that never applied Unknown.
		return metav1.ConditionUnknown, deps.Reason, deps.Message
	case apply == nil:
		return metav1.ConditionUnknown, ReasonNoApplyYet, "no apply has finished yet"
	case apply.Status != metav1.ConditionTrue:
		return apply.Status, apply.Reason, apply.Message
	}
	// Applied but not provisioned: the outputs or the health say why.
	for _, c := range []*metav1.Condition{Get(conds, OutputsValid), Get(conds, InfrastructureHealthy)} {
		if c != nil && c.Status != metav1.ConditionTrue {
			return c.Status, c.Reason, c.Message
		}
	}
	return metav1.ConditionTrue, ReasonReady, apply.Message
}

// provisionedReadiness is Ready once provisioned: the health of the infrastructure, and for a
// pool a failed apply.
func provisionedReadiness(conds []metav1.Condition, in ReadyInputs) (metav1.ConditionStatus, string, string) {
	if apply := Get(conds, ApplyJobSucceeded); in.AppliesAfterProvisioning && apply != nil && apply.Status == metav1.ConditionFalse {
		return metav1.ConditionFalse, apply.Reason, apply.Message
	}
	health := Get(conds, InfrastructureHealthy)
	switch {
	case health == nil:
		return metav1.ConditionUnknown, ReasonHealthUnknown, "the infrastructure's health has not been read"
	case health.Status == metav1.ConditionTrue:
		return metav1.ConditionTrue, ReasonReady, health.Message
	default:
		return health.Status, health.Reason, health.Message
	}
}

func ready(status metav1.ConditionStatus, reason, message string, generation int64, now time.Time) metav1.Condition {
	return metav1.Condition{Type: Ready, Status: status, Reason: reason, Message: message, ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(now)}
}

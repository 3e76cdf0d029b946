package workspace

// Event reasons the controller records on its objects. Each Job's outcome event is recorded
// once, by the pass that wrote its bookkept mark.
const (
	EventJobCreated                      = "JobCreated"
	EventJobSucceeded                    = "JobSucceeded"
	EventJobFailed                       = "JobFailed"
	EventJobDeadlineExceeded             = "JobDeadlineExceeded"
	EventJobInterrupted                  = "JobInterrupted"
	EventStuckJobDeleted                 = "StuckJobDeleted"
	EventEnvDropped                      = "EnvDropped"
	EventDestructivePlanBlocked          = "DestructivePlanBlocked"
	EventDestructivePlanApprovalConsumed = "DestructivePlanApprovalConsumed"
	EventPlanReady                       = "PlanReady"
	EventPlanApproved                    = "PlanApproved"
	EventPlanChanged                     = "PlanChanged"
	EventPlanApplied                     = "PlanApplied"
	EventDriftDetected                   = "DriftDetected"
	EventDriftRemediationStarted         = "DriftRemediationStarted"
	EventDriftResolved                   = "DriftResolved"
	EventStateBackedUp                   = "StateBackedUp"
	EventStateRestored                   = "StateRestored"
	EventForceUnlocked                   = "ForceUnlocked"
	EventStateLocked                     = "StateLocked"
	EventJobNameTaken                    = "JobNameTaken"
	EventPlanKeyNotOwned                 = "PlanKeyNotOwned"
	EventApprovalUnguarded               = "ApprovalUnguarded"
	EventStateLost                       = "StateLost"
	EventDigestUnknown                   = "DigestUnknown"
	EventPlanDigestUnknown               = "PlanDigestUnknown"
	EventDurableInputsTampered           = "DurableInputsTampered"
	EventImagePinned                     = "ImagePinned"
	EventServiceAccountNotOptedIn        = "ServiceAccountNotOptedIn"
	EventCLIConfigNotFound               = "CLIConfigNotFound"
	EventStateKeysNotFound               = "StateKeysNotFound"
	EventStatePartsNotProvided           = "StatePartsNotProvided"
	EventEnvSourceNotOptedIn             = "EnvSourceNotOptedIn"
	EventImageNotAllowed                 = "ImageNotAllowed"
	EventProvisioned                     = "Provisioned"
	EventProviderIDSet                   = "ProviderIDSet"
	EventRemediationRequested            = "RemediationRequested"
	EventRemediationWithdrawn            = "RemediationWithdrawn"
	EventControlPlaneEndpointSet         = "ControlPlaneEndpointSet"
	EventOutputsInvalid                  = "OutputsInvalid"
	EventPaused                          = "Paused"
	EventResumed                         = "Resumed"
	EventInfrastructureAbandoned         = "InfrastructureAbandoned"
	EventExternallyManagedReleased       = "ExternallyManagedReleased"
	EventExportsNotPublished             = "ExportsNotPublished"
	EventForegroundDeletionConverted     = "ForegroundDeletionConverted"
	EventMirrorCreated                   = "MirrorCreated"
	EventMirrorRemoved                   = "MirrorRemoved"
	EventBootstrapDataRefused            = "BootstrapDataRefused"
)

// EventDoc describes an event reason for the reference in docs/metrics-events.md.
type EventDoc struct {
	Reason string
	// Type is Normal or Warning.
	Type    string
	Meaning string
}

// Events lists every event reason the controller records; docs/metrics-events.md is generated
// from it, and a test fails when the code records a reason that is not here.
var Events = []EventDoc{
	{EventJobCreated, "Normal", "A Job started: its op, attempt and the reason it was decided."},
	{EventJobSucceeded, "Normal", "A Job succeeded (once per Job, at bookkeeping)."},
	{EventJobFailed, "Warning", "A Job failed, or creating it was rejected by the API server."},
	{EventJobDeadlineExceeded, "Warning", "A Job was stopped by its activeDeadlineSeconds; it counts toward backoff."},
	{EventJobInterrupted, "Warning", "A Job was stopped from outside (drain, deletion), or an apply disappeared while it ran."},
	{EventStuckJobDeleted, "Warning", "An active Job older than a minute without its per-run Secret and with no started pod was deleted."},
	{EventEnvDropped, "Warning", "Environment variables of spec.jobs.env that the runner controls (TF_*, KUBE_*, HOME, …) were left out."},
	{EventDestructivePlanBlocked, "Warning", "A guarded apply stopped before a plan that deletes or replaces."},
	{EventDestructivePlanApprovalConsumed, "Normal", "An apply of the inputs whose destructive plan was approved succeeded; the approval is removed."},
	{EventPlanReady, "Normal", "A plan Job produced a plan that waits for approval (applyPolicy Manual)."},
	{EventPlanApproved, "Normal", "The apply of an approved plan started."},
	{EventPlanChanged, "Warning", "An approved apply met a different plan and applied nothing; the new plan waits."},
	{EventPlanApplied, "Normal", "The approved plan was applied; the approval is removed."},
	{EventDriftDetected, "Warning", "A drift check found the infrastructure differs from the state."},
	{EventDriftRemediationStarted, "Normal", "An apply started to remediate drift (drift action Remediate)."},
	{EventDriftResolved, "Normal", "An apply succeeded after drift was found."},
	{EventStateBackedUp, "Normal", "A new state serial was copied into a state backup Secret."},
	{EventStateRestored, "Normal", "A restore Job pushed a state backup back."},
	{EventForceUnlocked, "Warning", "The state lock was left by a finished or vanished pod of the object's own Jobs; the new Job releases it first."},
	{EventStateLocked, "Warning", "The state lock is held by someone else; the new Job waits lockTimeoutSeconds for it."},
	{EventJobNameTaken, "Warning", "A Job of the name the controller would create exists and is not controlled by the object; the op waits until it is deleted."},
	{EventPlanKeyNotOwned, "Warning", "The plan-key Secret exists and is not the one the controller made for the object (owner reference, labels, one 32-byte key); no plan or approved apply starts until it is deleted."},
	{EventApprovalUnguarded, "Warning", "An apply would act on an approval annotation while the approval policy (artifacts/policy) does not keep them to the runs API server: it waits; or, with --require-approval-policy=false, it starts and says so."},
	{EventStateLost, "Warning", "The state is missing although an apply once succeeded (captf.io/applied on the durable inputs): nothing is applied and deletion is held until it is restored or abandoned."},
	{EventDigestUnknown, "Warning", "A refresh, drift, destroy or restore runs the spec's image reference because no digest is pinned yet."},
	{EventPlanDigestUnknown, "Warning", "An approved apply did not start: the image digest its plan Job ran is unknown (the Job is gone or reported none); a new plan must be made and approved."},
	{EventDurableInputsTampered, "Warning", "The durable inputs Secret is not owned by the object or its signature does not verify: someone else changed it; no Job starts until it is deleted."},
	{EventImagePinned, "Normal", "A successful apply pinned the digest its pod ran; later non-apply runs use it."},
	{EventProvisioned, "Normal", "The applied state's outputs meet the contract and its health is known: status.initialization.provisioned is true, for good."},
	{EventProviderIDSet, "Normal", "A machine's spec.providerID was set from the module's provider_id output (once; it never changes)."},
	{EventRemediationRequested, "Warning", "A machine with spec.remediation.annotateMachine asked Cluster API to replace it: its Machine got cluster.x-k8s.io/remediate-machine, because the module reports it terminated or unhealthy in unhealthyThreshold readings in a row."},
	{EventRemediationWithdrawn, "Normal", "A machine whose replacement captf had asked for is healthy again: captf removed its request from the Machine."},
	{EventControlPlaneEndpointSet, "Normal", "A cluster's spec.controlPlaneEndpoint was set from the module's control_plane_endpoint output (once)."},
	{EventOutputsInvalid, "Warning", "The module's outputs stopped meeting the contract (OutputsValid False): the output and the rule it breaks, never its value."},
	{EventPaused, "Normal", "The object or its Cluster was paused: Jobs are booked and stuck ones deleted, none starts."},
	{EventResumed, "Normal", "The pause ended."},
	{EventInfrastructureAbandoned, "Warning", "A deleted object whose captf.io/abandon-infrastructure names its UID was let go without a destroy; its state is removed."},
	{EventExternallyManagedReleased, "Normal", "A deleted object with cluster.x-k8s.io/managed-by was let go without a destroy; its state, backups and durable inputs are kept, unowned."},
	{EventForegroundDeletionConverted, "Normal", "An object deleted in the foreground lost the foregroundDeletion finalizer, so the garbage collector cannot take its state and Jobs before its destroy ran."},
	{EventMirrorCreated, "Normal", "The credentials of the object's TerraformClusterIdentity were copied into a Secret of its namespace, which its Jobs read."},
	{EventMirrorRemoved, "Normal", "The copy of an identity's credentials was deleted: the identity no longer lends them to the namespace, and no other object uses it."},
	{EventBootstrapDataRefused, "Warning", "The bootstrap data Secret a Machine or MachinePool names is not of type cluster.x-k8s.io/secret, lacks the label cluster.x-k8s.io/cluster-name of its cluster, is the cluster's kubeconfig, or is controlled by something other than its bootstrap config; no Job starts."},
	{EventExportsNotPublished, "Warning", "A cluster's exports output is too large for status.exports (65536 bytes of JSON); machines and pools read it from the state all the same."},
	{EventServiceAccountNotOptedIn, "Warning", "spec.jobs.serviceAccountName names a ServiceAccount that does not exist or lacks the label captf.io/runner=true; no Job starts."},
	{EventCLIConfigNotFound, "Warning", "spec.jobs.cliConfigSecretRef names a Secret that does not exist, lacks the label captf.io/cli-config=true or the key tofurc; no Job starts."},
	{EventStatePartsNotProvided, "Warning", "The state parts a running Job asked for, or their Role, could not be created; the run fails when its wait ends, and the next run asks again."},
	{EventStateKeysNotFound, "Warning", "spec.stateEncryption names a Secret that does not exist, lacks the label captf.io/state-key=true or the key keyID, or holds a key that is not a valid key id with a passphrase of at least 16 characters; no Job starts."},
	{EventImageNotAllowed, "Warning", "The module image is not among the images the install (--allowed-images) or the object's TerraformClusterIdentity (spec.allowedImages) allows; no Job starts."},
	{EventEnvSourceNotOptedIn, "Warning", "spec.jobs.env takes a value from a Secret or ConfigMap that does not exist or lacks the label captf.io/env=true; no Job starts."},
}

package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WorkspaceSpec is the part of the spec every kind shares: which module to run, with which
// variables, and how its Jobs run.
type WorkspaceSpec struct {
	// source names the image that holds the Terraform/OpenTofu module and its runtime.
	// +required
	Source SourceSpec `json:"source"`

	// variables are the module's input variables, as one JSON object. The rendered inputs
	// (module block and variables) may not exceed 1,000,000 bytes.
	// +optional
	// +kubebuilder:validation:Type=object
	// +kubebuilder:validation:MaxProperties=256
	// +kubebuilder:pruning:PreserveUnknownFields
	Variables *apiextensionsv1.JSON `json:"variables,omitempty"`

	// variablesFrom are ConfigMaps and Secrets of the object's namespace whose keys become
	// variables, so secret values need not sit in spec.variables. A source must carry the label
	// captf.io/variables=true. Later sources win over earlier ones, and spec.variables over all.
	// A variable whose value comes from a Secret is sensitive in the rendered root.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	VariablesFrom []VariablesSource `json:"variablesFrom,omitempty"`

	// identityRef names the TerraformClusterIdentity whose credentials the object's runs get.
	// Unset on a machine or pool: its TerraformCluster's. Unset everywhere: none.
	// +optional
	IdentityRef *IdentityReference `json:"identityRef,omitempty"`

	// jobs is the policy of the Jobs that run this object's operations.
	// +optional
	Jobs JobPolicy `json:"jobs,omitempty"`

	// stateEncryption encrypts the object's state with OpenTofu's state encryption: a key
	// derived from a passphrase (pbkdf2) and AES-GCM. Whoever may read the state Secret then
	// sees its serial, lineage and size, not its resources or outputs.
	// +optional
	StateEncryption *StateEncryption `json:"stateEncryption,omitempty"`
}

// StateEncryption names the passphrases a state is encrypted with.
type StateEncryption struct {
	// secretRef names a Secret in the object's namespace whose keys are key ids and whose
	// values are passphrases of at least 16 characters of UTF-8 text (32 random bytes, base64
	// encoded, are recommended: openssl rand -base64 32). It
	// must carry the label captf.io/state-key=true; until it does and holds keyID, no Job starts.
	// Only its keys are mounted into runs, and the controller reads it to read the state.
	// +required
	SecretRef SourceReference `json:"secretRef"`

	// keyID is the key every state write is encrypted with. The Secret's other keys only
	// decrypt, so a rotation adds a key, points keyID at it, and removes the old key once the
	// object's status reports the new one (status.stateKeyID). A state in the clear is
	// encrypted by the object's next apply or refresh.
	// +required
	// +kubebuilder:validation:Pattern=`^[A-Za-z][A-Za-z0-9_-]{0,62}$`
	KeyID string `json:"keyID"`
}

// StateKeyLabel opts a Secret in as the source of state passphrases (spec.stateEncryption):
// without it, the Secret is treated as missing, so the field cannot mount any Secret of the
// namespace into a run.
const StateKeyLabel = "captf.io/state-key"

// VariablesSource is a ConfigMap or a Secret whose keys become variables.
// +kubebuilder:validation:XValidation:rule="has(self.configMapRef) != has(self.secretRef)",message="exactly one of configMapRef and secretRef must be set"
type VariablesSource struct {
	// configMapRef names a ConfigMap in the object's namespace; binaryData keys count as data.
	// +optional
	ConfigMapRef *SourceReference `json:"configMapRef,omitempty"`

	// secretRef names a Secret in the object's namespace.
	// +optional
	SecretRef *SourceReference `json:"secretRef,omitempty"`

	// optional lets the object run without the source while it does not exist.
	// +optional
	Optional bool `json:"optional,omitempty"`

	// format says how each value is read: String passes it as a string (the module's variable
	// type converts it), JSON parses it as a JSON value.
	// +optional
	// +kubebuilder:default=String
	// +kubebuilder:validation:Enum=String;JSON
	Format VariablesFormat `json:"format,omitempty"`
}

// SourceReference names an object in the same namespace.
type SourceReference struct {
	// name of the object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// VariablesFormat is how the values of a variables source are read.
type VariablesFormat string

// The formats of a variables source.
const (
	VariablesFormatString VariablesFormat = "String"
	VariablesFormatJSON   VariablesFormat = "JSON"
)

// VariablesLabel opts a ConfigMap or Secret in as a variables source: without it, a source is
// treated as missing, so spec.variablesFrom cannot read any Secret of the namespace.
const VariablesLabel = "captf.io/variables"

// SourceSpec names the module image.
type SourceSpec struct {
	// image is the reference of the image that carries the module at /captf/module and the
	// Terraform/OpenTofu binary at /captf/runtime.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image"`

	// imagePullPolicy of the module image.
	// +optional
	// +kubebuilder:default=IfNotPresent
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
}

// JobPolicy controls the Jobs of one object. Every field is optional; defaults are resolved at
// reconcile time and never written back.
// +kubebuilder:validation:XValidation:rule="!has(self.lockTimeoutSeconds) || self.lockTimeoutSeconds < (has(self.activeDeadlineSeconds) ? self.activeDeadlineSeconds : 3600)",message="lockTimeoutSeconds must be less than activeDeadlineSeconds (default 3600)",fieldPath=".lockTimeoutSeconds"
type JobPolicy struct {
	// successfulJobsHistoryLimit is how many succeeded Jobs of each operation are kept. The
	// newest success of an operation is always kept. Default 3.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	SuccessfulJobsHistoryLimit *int32 `json:"successfulJobsHistoryLimit,omitempty"`

	// failedJobsHistoryLimit is how many failed Jobs of each operation are kept. The newest
	// failure is kept while no newer success exists. It also bounds the backoff: once this many
	// failures follow each other, the delay is the 10-minute cap. Default 3.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	FailedJobsHistoryLimit *int32 `json:"failedJobsHistoryLimit,omitempty"`

	// activeDeadlineSeconds is the deadline of each Job. Default 3600.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	ActiveDeadlineSeconds *int64 `json:"activeDeadlineSeconds,omitempty"`

	// lockTimeoutSeconds is how long a run waits for the state lock. It must be less than
	// activeDeadlineSeconds. Default 300.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	LockTimeoutSeconds *int64 `json:"lockTimeoutSeconds,omitempty"`

	// serviceAccountName runs the Jobs under another ServiceAccount than the object's own runner
	// identity (captf-runner-<state suffix>). It must carry the label captf.io/runner=true and needs
	// get and update on the object's state Secret and lock Lease.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// imagePullSecrets for the module image and the runner.
	// +optional
	// +kubebuilder:validation:MaxItems=10
	// +listType=atomic
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// env adds environment variables to the run. Names the runner controls are dropped: those
	// starting with TF_, KUBE_ or KUBERNETES_, HOME, TMPDIR, CHECKPOINT_DISABLE, TERRAFORM_CONFIG
	// and XDG_CONFIG_HOME, XDG_DATA_HOME, XDG_CACHE_HOME and XDG_RUNTIME_DIR, through which
	// OpenTofu would find another CLI configuration, credentials or plugins. A provider mirror
	// or registry credentials come from cliConfigSecretRef instead. A value taken from a Secret
	// or a ConfigMap (valueFrom.secretKeyRef, valueFrom.configMapKeyRef) is used only when that
	// object exists and carries the label captf.io/env=true; until every one does, no Job starts.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	Env []corev1.EnvVar `json:"env,omitempty"`

	// resources of the run container; replaces the default as a whole.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// cliConfigSecretRef names a Secret in the object's namespace whose key tofurc is the
	// OpenTofu CLI configuration of every run: a provider mirror or network mirror, registry
	// credentials, OCI registry credentials. It replaces the configuration the runner writes
	// for the image's provider mirror at /captf/providers, so a run installs providers only as
	// this file says; name that mirror in it to keep using it. The Secret must carry the label
	// captf.io/cli-config=true and the key tofurc; until it does, no Job starts.
	// +optional
	CLIConfigSecretRef *SourceReference `json:"cliConfigSecretRef,omitempty"`
}

// CLIConfigLabel opts a Secret in as a CLI configuration (spec.jobs.cliConfigSecretRef): without
// it, the Secret is treated as missing, so the field cannot mount any Secret of the namespace
// into a run.
const CLIConfigLabel = "captf.io/cli-config"

// EnvSourceLabel opts a Secret or a ConfigMap in as the source of environment variables
// (spec.jobs.env[].valueFrom): without it, a reference to it starts no Job, so the field cannot
// read any Secret of the namespace into a run.
const EnvSourceLabel = "captf.io/env"

// CLIConfigKey is the key of a CLI configuration Secret that holds the file.
const CLIConfigKey = "tofurc"

// DriftAction says what a detected drift leads to.
// +kubebuilder:validation:Enum=Report;Remediate
type DriftAction string

const (
	// DriftActionReport only reports drift in conditions and events.
	DriftActionReport DriftAction = "Report"
	// DriftActionRemediate applies the current inputs again when drift is found.
	DriftActionRemediate DriftAction = "Remediate"
)

// DriftSpec schedules drift checks.
type DriftSpec struct {
	// intervalSeconds between drift checks; 0 turns them off. Default 1800.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=604800
	IntervalSeconds *int64 `json:"intervalSeconds,omitempty"`

	// action taken on drift. Default Report.
	// +optional
	Action DriftAction `json:"action,omitempty"`
}

// Operation is one kind of run.
// +kubebuilder:validation:Enum=apply;plan;destroy;refresh;drift;restore
type Operation string

// WorkspaceStatus is the status every kind shares. Nothing in it is load-bearing: all of it can be
// rebuilt from the spec, the state, the durable inputs and the retained Jobs.
type WorkspaceStatus struct {
	// conditions of the object: ApplyJobSucceeded, DriftJobSucceeded, DriftDetected,
	// StateReadable and the Ready summary.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// initialization reports the CAPI provisioning contract.
	// +optional
	Initialization *Initialization `json:"initialization,omitempty"`

	// observedGeneration is the generation the controller last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// lastHandledReconcileAt is the value of the captf.io/reconcile-requested-at annotation
	// (kubectl captf reconcile) when the controller last passed over the object: a request has
	// had its pass once its value shows here. Values longer than 64 characters are not copied.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	LastHandledReconcileAt string `json:"lastHandledReconcileAt,omitempty"`

	// activeJob is the Job that runs now, if any.
	// +optional
	ActiveJob *ActiveJob `json:"activeJob,omitempty"`

	// lastRun summarises the newest finished Job.
	// +optional
	LastRun *LastRun `json:"lastRun,omitempty"`

	// lastDriftCheck is when the last successful drift check finished.
	// +optional
	LastDriftCheck *metav1.Time `json:"lastDriftCheck,omitempty"`

	// lastRefresh is when the last successful refresh finished.
	// +optional
	LastRefresh *metav1.Time `json:"lastRefresh,omitempty"`

	// observedStateSerial is the newest state serial the controller backed up.
	// +optional
	ObservedStateSerial int64 `json:"observedStateSerial,omitempty"`

	// stateKeyID is the key (spec.stateEncryption.keyID) the state was encrypted with when the
	// controller last read it; empty while the state is in the clear.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	StateKeyID string `json:"stateKeyID,omitempty"`

	// source is the module image the newest successful apply ran, pinned by digest: refresh,
	// drift, destroy and restore run this digest, not the tag. Empty until an apply whose pod
	// reported a digest succeeds.
	// +optional
	Source *SourceStatus `json:"source,omitempty"`
}

// SourceStatus is a module image pinned by digest.
type SourceStatus struct {
	// image is the reference the apply was started with, as written in the spec.
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image"`
	// digest is the digest its pod ran (sha256:<64 hex>).
	// +optional
	// +kubebuilder:validation:MaxLength=71
	Digest string `json:"digest,omitempty"`
}

// Initialization is the CAPI v1beta2 initialization status.
type Initialization struct {
	// provisioned is true once the first apply succeeded; it is never set back.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// ActiveJob names the running Job of an object.
type ActiveJob struct {
	// name of the Job.
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// operation the Job runs.
	Operation Operation `json:"operation"`
	// attempt of the Job within its operation.
	// +kubebuilder:validation:Minimum=1
	Attempt int32 `json:"attempt"`
	// startTime is when the Job was created.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
}

// LastRun summarises a finished Job.
type LastRun struct {
	// job is the name of the Job.
	Job string `json:"job"`
	// operation the Job ran.
	Operation Operation `json:"operation"`
	// outcome of the Job: Succeeded, Failed, DeadlineExceeded, Interrupted, Blocked,
	// PlanChanged or PlanUnreadable.
	Outcome string `json:"outcome"`
	// finishedAt is when the Job finished.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// error of a failed run.
	// +optional
	Error *RunError `json:"error,omitempty"`
	// drift found by a drift check.
	// +optional
	Drift *DriftSummary `json:"drift,omitempty"`
}

// RunError describes why a run failed.
type RunError struct {
	// kind of the error: image-layout, step, interrupted, blocked or plan-changed.
	Kind string `json:"kind"`
	// step that failed, if any.
	// +optional
	Step string `json:"step,omitempty"`
	// summary of the error, at most 512 bytes.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Summary string `json:"summary,omitempty"`
}

// DriftSummary counts the changes a drift check found.
type DriftSummary struct {
	// add is how many resources would be created.
	Add int32 `json:"add"`
	// change is how many resources would be updated in place.
	Change int32 `json:"change"`
	// destroy is how many resources would be deleted or replaced.
	Destroy int32 `json:"destroy"`
	// resources are up to 20 of the drifted addresses.
	// +optional
	// +kubebuilder:validation:MaxItems=20
	// +listType=atomic
	Resources []string `json:"resources,omitempty"`
}

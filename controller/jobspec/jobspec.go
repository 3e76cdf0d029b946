// Package jobspec builds the Kubernetes Job of one run: its metadata from the run model, the
// runner init container that installs the runner, the source container that runs it against the
// module image, and the volumes that hand it its inputs. It is pure; the controller creates what
// it returns.
package jobspec

import (
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/jobs"
)

// Defaults of the Job policy, resolved here and never written back to the object.
const (
	DefaultActiveDeadlineSeconds = 3600
	DefaultLockTimeoutSeconds    = 300
	// TerminationGracePeriodSeconds gives OpenTofu time to stop cleanly and release its lock.
	TerminationGracePeriodSeconds = 600
	// stopTimeoutSeconds is the grace period less a margin, so the runner writes its result
	// before the kubelet kills it.
	stopTimeoutSeconds = TerminationGracePeriodSeconds - 30
)

// Paths inside the pod.
const (
	RunnerBinDir  = "/captf/bin"
	RunnerPath    = RunnerBinDir + "/runner"
	WorkDir       = "/captf/work"
	ConfigDir     = "/captf/config"
	PlanKeyDir    = "/captf/plan-key"
	PlanKeyFile   = PlanKeyDir + "/key"
	CLIConfigDir  = "/captf/cli-config"
	CLIConfigFile = CLIConfigDir + "/" + infrav1.CLIConfigKey
	ModuleDir     = "/captf/module"
	// ProvidersDir is the module image's provider mirror (optional).
	ProvidersDir   = "/captf/providers"
	RuntimePath    = "/captf/runtime"
	ImageRunnerBin = "/runner"
	// TerminationMessagePath is where the runner writes its result.
	TerminationMessagePath = "/dev/termination-log"
	// RunnerContainer and SourceContainer name the two containers.
	RunnerContainer = "runner"
	SourceContainer = "source"
)

// Params are the facts a Job is built from.
type Params struct {
	Kind        jobs.Kind
	Namespace   string
	ObjectName  string
	ClusterName string
	// WatchFilter is the object's Cluster API watch label (clusterv1.WatchLabel), which the Job
	// and its pods carry after it, so that a controller started with that watch filter follows
	// only its own runs; "" when the object has none.
	WatchFilter string
	// Owner is the controller owner reference to the object.
	Owner metav1.OwnerReference

	Name    string
	Op      jobs.Op
	Attempt int32
	// InputsHash is recorded on the Job of an apply, plan or restore, and passed to the
	// runner with GuardDeletes.
	InputsHash string

	Policy      infrav1.JobPolicy
	Source      infrav1.SourceSpec
	RunnerImage string
	// StateSuffix is the state Secret suffix handed to the kubernetes backend.
	StateSuffix string
	// Annotations are added to the Job, e.g. captf.io/drift-remediation.
	Annotations map[string]string
	// PlanKeySecret, when set, is mounted read-only for the runner to key the plan hash.
	PlanKeySecret string

	// ForceUnlock, when set, is the stale state lock ID the runner releases after init.
	ForceUnlock string
	// GuardDeletes makes an apply stop before a plan that deletes or replaces; the runner gets
	// InputsHash to compare with AllowDeletesHash.
	GuardDeletes bool
	// AllowDeletesHash, when set, is the inputs hash whose destructive plans were approved.
	// It is passed only with GuardDeletes.
	AllowDeletesHash string
	// ExpectPlan, when set, is the approved plan hash an apply must match.
	ExpectPlan string
	// Restore is set for a restore: the backup it pushes.
	Restore *Restore
	// StateKeys, when set, encrypt the state (spec.stateEncryption).
	StateKeys *StateKeys
	// CredentialsSecret, when set, is the object's copy of its identity's credentials: its keys
	// become environment variables (the runner drops TF_* and KUBE_* ones) and files in
	// CredentialsDir.
	CredentialsSecret string
}

// CredentialsDir is where a run finds its identity's credentials as files, one per key.
const CredentialsDir = "/var/run/captf/credentials"

// StateKeys are the passphrases a run encrypts and decrypts the state with.
type StateKeys struct {
	// Secret holds them, one key per key id; only the IDs are mounted, at StateKeysDir.
	Secret string
	IDs    []string
	// Current is the key id every write is encrypted with.
	Current string
	// AcceptPlaintext lets the run read a state in the clear, which its next write encrypts:
	// set while the state the controller read is in the clear, so a state once encrypted is
	// never taken in the clear again.
	AcceptPlaintext bool
}

// StateKeysDir is where a run finds its state passphrases, a file per key id.
const StateKeysDir = "/captf/state-keys"

// Restore is what a restore Job pushes.
type Restore struct {
	// Backup is the state backup Secret: its state is projected into the config volume as
	// the chunk restore/0, beside the per-run Secret's files, and chunk i of a larger state
	// from jobs.BackupPartName(Backup, i) as restore/i.
	Backup string
	// Chunks is how many Secrets the backup's state is in; 0 counts as 1.
	Chunks int
	// Resources is how many resource instances the backup holds; the runner fails a restore
	// that lists none while this is positive.
	Resources int
}

// Build returns the Job.
func Build(p Params) *batchv1.Job {
	labels := jobs.Labels(p.Kind, p.ObjectName, p.ClusterName, p.Op, p.Attempt)
	if p.WatchFilter != "" {
		labels[clusterv1.WatchLabel] = p.WatchFilter
	}
	annotations := map[string]string{}
	if p.InputsHash != "" && (p.Op == jobs.OpApply || p.Op == jobs.OpPlan || p.Op == jobs.OpRestore) {
		annotations[jobs.AnnotationInputsHash] = p.InputsHash
	}
	for k, v := range p.Annotations {
		annotations[k] = v
	}
	deadline := ptr.Deref(p.Policy.ActiveDeadlineSeconds, DefaultActiveDeadlineSeconds)
	return &batchv1.Job{
		TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            p.Name,
			Namespace:       p.Namespace,
			Labels:          labels,
			Annotations:     annotations,
			OwnerReferences: []metav1.OwnerReference{p.Owner},
		},
		Spec: batchv1.JobSpec{
			// A failed pod is a failed Job: the controller retries with its own backoff.
			BackoffLimit:          ptr.To[int32](0),
			ActiveDeadlineSeconds: ptr.To(deadline),
			// No TTL: finished Jobs stay until pruned, since backoff and conditions derive from them.
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       podSpec(p),
			},
		},
	}
}

// ServiceAccountName is the identity an object's runs use: the policy's override, or the
// object's own runner identity (jobs.RunnerIdentityName), whose Role names only its state Secret
// and lock Lease.
func ServiceAccountName(policy infrav1.JobPolicy, stateSuffix string) string {
	if policy.ServiceAccountName != "" {
		return policy.ServiceAccountName
	}
	return jobs.RunnerIdentityName(stateSuffix)
}

func podSpec(p Params) corev1.PodSpec {
	serviceAccount := ServiceAccountName(p.Policy, p.StateSuffix)
	volumes := []corev1.Volume{
		{Name: "runner", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		configVolume(p),
	}
	mounts := []corev1.VolumeMount{
		{Name: "runner", MountPath: RunnerBinDir, ReadOnly: true},
		{Name: "work", MountPath: WorkDir},
		{Name: "tmp", MountPath: "/tmp"},
		{Name: "config", MountPath: ConfigDir, ReadOnly: true},
	}
	if p.PlanKeySecret != "" {
		volumes = append(volumes, corev1.Volume{Name: "plan-key", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: p.PlanKeySecret, DefaultMode: ptr.To[int32](0o440)}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "plan-key", MountPath: PlanKeyDir, ReadOnly: true})
	}
	if ref := p.Policy.CLIConfigSecretRef; ref != nil {
		// Only the configuration's key is projected: nothing else of the Secret enters the pod.
		volumes = append(volumes, corev1.Volume{Name: "cli-config", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName:  ref.Name,
			Items:       []corev1.KeyToPath{{Key: infrav1.CLIConfigKey, Path: infrav1.CLIConfigKey}},
			DefaultMode: ptr.To[int32](0o440),
		}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "cli-config", MountPath: CLIConfigDir, ReadOnly: true})
	}
	if k := p.StateKeys; k != nil {
		// Only the key ids the controller checked are projected.
		items := make([]corev1.KeyToPath, 0, len(k.IDs))
		for _, id := range k.IDs {
			items = append(items, corev1.KeyToPath{Key: id, Path: id})
		}
		volumes = append(volumes, corev1.Volume{Name: "state-keys", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: k.Secret, Items: items, DefaultMode: ptr.To[int32](0o440),
		}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "state-keys", MountPath: StateKeysDir, ReadOnly: true})
	}
	var envFrom []corev1.EnvFromSource
	if p.CredentialsSecret != "" {
		volumes = append(volumes, corev1.Volume{Name: "credentials", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: p.CredentialsSecret, DefaultMode: ptr.To[int32](0o440)}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "credentials", MountPath: CredentialsDir, ReadOnly: true})
		envFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: p.CredentialsSecret}}}}
	}
	pullPolicy := p.Source.ImagePullPolicy
	if pullPolicy == "" {
		pullPolicy = corev1.PullIfNotPresent
	}
	return corev1.PodSpec{
		RestartPolicy:                 corev1.RestartPolicyNever,
		TerminationGracePeriodSeconds: ptr.To[int64](TerminationGracePeriodSeconds),
		ServiceAccountName:            serviceAccount,
		ImagePullSecrets:              p.Policy.ImagePullSecrets,
		SecurityContext: &corev1.PodSecurityContext{
			FSGroup:        ptr.To[int64](65532),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		InitContainers: []corev1.Container{{
			Name:            RunnerContainer,
			Image:           p.RunnerImage,
			ImagePullPolicy: corev1.PullIfNotPresent,
			Command:         []string{ImageRunnerBin, "copy", RunnerPath},
			VolumeMounts:    []corev1.VolumeMount{{Name: "runner", MountPath: RunnerBinDir}},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
			},
			SecurityContext: containerSecurity(true),
		}},
		Containers: []corev1.Container{{
			Name:                     SourceContainer,
			Image:                    p.Source.Image,
			ImagePullPolicy:          pullPolicy,
			Command:                  append([]string{RunnerPath, "run"}, runnerArgs(p)...),
			EnvFrom:                  envFrom,
			Env:                      env(p),
			VolumeMounts:             mounts,
			Resources:                resources(p.Policy),
			TerminationMessagePath:   TerminationMessagePath,
			TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			SecurityContext:          containerSecurity(false),
		}},
		Volumes: volumes,
	}
}

// configVolume is the per-run Secret; a restore also gets the backup's state, in chunks
// restore/0…n-1.
func configVolume(p Params) corev1.Volume {
	if p.Restore == nil {
		return corev1.Volume{Name: "config", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: jobs.RunSecretName(p.Name), DefaultMode: ptr.To[int32](0o440)}}}
	}
	v := corev1.Volume{Name: "config", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: ptr.To[int32](0o440),
		Sources: []corev1.VolumeProjection{
			{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: jobs.RunSecretName(p.Name)}}},
		},
	}}}
	for i := range p.Restore.chunks() {
		name := p.Restore.Backup
		if i > 0 {
			name = jobs.BackupPartName(name, i)
		}
		v.Projected.Sources = append(v.Projected.Sources, corev1.VolumeProjection{Secret: &corev1.SecretProjection{
			LocalObjectReference: corev1.LocalObjectReference{Name: name},
			Items:                []corev1.KeyToPath{{Key: BackupStateKey, Path: "restore/" + strconv.Itoa(i)}},
		}})
	}
	return v
}

// chunks is how many Secrets the backup's state is in.
func (r Restore) chunks() int { return max(r.Chunks, 1) }

// BackupStateKey is the data key of a state backup: the state as the kubernetes backend stores it.
const BackupStateKey = "tfstate"

// reservedEnv are the variables a policy cannot set: those that configure the runtime
// (jobs.ConfiguresRuntime), which the runner owns, the ones it sets itself (TMPDIR,
// CHECKPOINT_DISABLE), and KUBERNETES_*, which would point the runner's state API elsewhere with
// the pod's token.
func reservedEnv(name string) bool {
	switch name {
	case "TMPDIR", "CHECKPOINT_DISABLE":
		return true
	}
	return jobs.ConfiguresRuntime(name) || strings.HasPrefix(name, "KUBERNETES_")
}

// DroppedEnv lists the policy's environment variables the Job leaves out, for an event.
func DroppedEnv(policy infrav1.JobPolicy) []string {
	var dropped []string
	for _, e := range policy.Env {
		if reservedEnv(e.Name) {
			dropped = append(dropped, e.Name)
		}
	}
	return dropped
}

func env(p Params) []corev1.EnvVar {
	out := []corev1.EnvVar{
		{Name: "TF_IN_AUTOMATION", Value: "1"},
		{Name: "TF_INPUT", Value: "0"},
		{Name: "HOME", Value: WorkDir},
		{Name: "TMPDIR", Value: "/tmp"},
		{Name: "KUBE_NAMESPACE", Value: p.Namespace},
		{Name: "CHECKPOINT_DISABLE", Value: "1"},
	}
	for _, e := range p.Policy.Env {
		if !reservedEnv(e.Name) {
			out = append(out, e)
		}
	}
	return out
}

func resources(policy infrav1.JobPolicy) corev1.ResourceRequirements {
	if policy.Resources != nil {
		return *policy.Resources
	}
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")},
	}
}

func containerSecurity(init bool) *corev1.SecurityContext {
	sc := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	if init {
		sc.RunAsNonRoot = ptr.To(true)
		sc.RunAsUser = ptr.To[int64](65532)
	}
	return sc
}

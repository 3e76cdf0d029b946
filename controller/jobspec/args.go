package jobspec

import (
	"encoding/json"
	"fmt"
	"strconv"

	"k8s.io/utils/ptr"

	"github.com/captf/captf/jobs"
	"github.com/captf/captf/runner/runflag"
)

// runnerArgs are the arguments of `runner run`.
func runnerArgs(p Params) []string {
	lockTimeout := ptr.Deref(p.Policy.LockTimeoutSeconds, DefaultLockTimeoutSeconds)
	args := []string{
		runflag.Arg(runflag.Op, string(p.Op)),
		runflag.Arg(runflag.Bin, RuntimePath),
		runflag.Arg(runflag.Module, ModuleDir),
		runflag.Arg(runflag.Providers, ProvidersDir),
		runflag.Arg(runflag.Workdir, WorkDir),
		runflag.Arg(runflag.Config, ConfigDir),
		runflag.Arg(runflag.Result, TerminationMessagePath),
		runflag.Arg(runflag.Image, p.Source.Image),
		runflag.Arg(runflag.LockTimeout, fmt.Sprintf("%ds", lockTimeout)),
		runflag.Arg(runflag.StopTimeout, fmt.Sprintf("%ds", stopTimeoutSeconds)),
		runflag.Arg(runflag.BackendConfig, "secret_suffix="+p.StateSuffix),
		runflag.Arg(runflag.BackendConfig, "namespace="+p.Namespace),
		runflag.Arg(runflag.BackendConfig, "in_cluster_config=true"),
		runflag.Arg(runflag.BackendConfig, "labels="+BackendLabels(p.Kind, p.ObjectName, p.ClusterName)),
	}
	if p.PlanKeySecret != "" {
		args = append(args, runflag.Arg(runflag.PlanKeyFile, PlanKeyFile))
	}
	if p.Policy.CLIConfigSecretRef != nil {
		args = append(args, runflag.Arg(runflag.CLIConfig, CLIConfigFile))
	}
	if k := p.StateKeys; k != nil {
		args = append(args, runflag.Arg(runflag.StateKeys, StateKeysDir), runflag.Arg(runflag.StateKey, k.Current))
		if k.AcceptPlaintext {
			args = append(args, runflag.Flag(runflag.StateAcceptPlaintext))
		}
	}
	if p.ForceUnlock != "" {
		args = append(args, runflag.Arg(runflag.ForceUnlock, p.ForceUnlock))
	}
	if p.GuardDeletes {
		args = append(args, runflag.Flag(runflag.GuardDeletes), runflag.Arg(runflag.InputsHash, p.InputsHash))
		if p.AllowDeletesHash != "" {
			args = append(args, runflag.Arg(runflag.AllowDeletesHash, p.AllowDeletesHash))
		}
	}
	if p.ExpectPlan != "" {
		args = append(args, runflag.Arg(runflag.ExpectPlan, p.ExpectPlan))
	}
	if p.Restore != nil {
		args = append(args,
			runflag.Arg(runflag.RestoreChunks, strconv.Itoa(p.Restore.chunks())),
			runflag.Arg(runflag.RestoreResources, strconv.Itoa(p.Restore.Resources)))
	}
	// The runner redacts the identity's credentials and the policy's variables from Secrets.
	if p.CredentialsSecret != "" {
		args = append(args, runflag.Arg(runflag.Credentials, CredentialsDir))
	}
	for _, e := range p.Policy.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && !reservedEnv(e.Name) {
			args = append(args, runflag.Arg(runflag.SecretEnv, e.Name))
		}
	}
	return args
}

// BackendLabels is the backend's labels setting, which the backend puts on the state Secret and
// its lock Lease when it creates them: the owner labels (the controller's metadata cache selects
// on the managed label and maps the Secret to its object by the others), the cluster-name label
// when the object has one, and clusterctl's move label, so `clusterctl move` takes the state
// along. It is JSON, which the backend reads as an HCL object; label keys and values hold no
// "${" that HCL would interpolate.
func BackendLabels(kind jobs.Kind, name, clusterName string) string {
	data, _ := json.Marshal(BackendLabelMap(kind, name, clusterName))
	return string(data)
}

// BackendLabelMap is the map BackendLabels encodes.
func BackendLabelMap(kind jobs.Kind, name, clusterName string) map[string]string {
	labels := jobs.OwnerLabels(kind, name)
	if clusterName != "" {
		labels[jobs.LabelClusterName] = jobs.LabelValue(clusterName)
	}
	labels[ClusterctlMoveLabel] = ""
	return labels
}

// ClusterctlMoveLabel marks objects `clusterctl move` moves with the cluster.
const ClusterctlMoveLabel = "clusterctl.cluster.x-k8s.io/move"

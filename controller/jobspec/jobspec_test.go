package jobspec

import (
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/jobs"
)

func params() Params {
	return Params{
		Kind: jobs.KindCluster, Namespace: "ns", ObjectName: "web", ClusterName: "prod",
		Owner: metav1.OwnerReference{APIVersion: "infrastructure.cluster.x-k8s.io/v1alpha1", Kind: "TerraformCluster", Name: "web", UID: "u1", Controller: ptr.To(true)},
		Name:  "captf-c-web-apply-a1-abcdef", Op: jobs.OpApply, Attempt: 1, InputsHash: "h1:x",
		Source:      infrav1.SourceSpec{Image: "modules/net:v1"},
		RunnerImage: "captf/manager:dev", StateSuffix: "0123456789abcdef-c",
	}
}

func TestBuild(t *testing.T) {
	for _, tc := range []struct {
		rule   string
		change func(*Params)
		check  func(*testing.T, *batchv1.Job)
	}{
		{"a failed pod is a failed Job", nil, func(t *testing.T, j *batchv1.Job) {
			if *j.Spec.BackoffLimit != 0 {
				t.Errorf("backoffLimit = %d", *j.Spec.BackoffLimit)
			}
		}},
		{"the deadline defaults to 3600 seconds", nil, func(t *testing.T, j *batchv1.Job) {
			if *j.Spec.ActiveDeadlineSeconds != 3600 {
				t.Errorf("activeDeadlineSeconds = %d", *j.Spec.ActiveDeadlineSeconds)
			}
		}},
		{"the deadline comes from the policy", func(p *Params) { p.Policy.ActiveDeadlineSeconds = ptr.To[int64](120) }, func(t *testing.T, j *batchv1.Job) {
			if *j.Spec.ActiveDeadlineSeconds != 120 {
				t.Errorf("activeDeadlineSeconds = %d", *j.Spec.ActiveDeadlineSeconds)
			}
		}},
		{"finished Jobs have no TTL", nil, func(t *testing.T, j *batchv1.Job) {
			if j.Spec.TTLSecondsAfterFinished != nil {
				t.Error("ttlSecondsAfterFinished is set")
			}
		}},
		{"pods never restart and get 600 seconds to stop", nil, func(t *testing.T, j *batchv1.Job) {
			s := j.Spec.Template.Spec
			if s.RestartPolicy != corev1.RestartPolicyNever || *s.TerminationGracePeriodSeconds != 600 {
				t.Errorf("restartPolicy %s grace %d", s.RestartPolicy, *s.TerminationGracePeriodSeconds)
			}
		}},
		{"the Job and its pods carry the run model's labels", nil, func(t *testing.T, j *batchv1.Job) {
			want := jobs.Labels(jobs.KindCluster, "web", "prod", jobs.OpApply, 1)
			for k, v := range want {
				if j.Labels[k] != v || j.Spec.Template.Labels[k] != v {
					t.Errorf("label %s = %q / %q, want %q", k, j.Labels[k], j.Spec.Template.Labels[k], v)
				}
			}
		}},
		{"the Job and its pods carry the object's watch-filter label", func(p *Params) { p.WatchFilter = "team-a" }, func(t *testing.T, j *batchv1.Job) {
			if j.Labels[clusterv1.WatchLabel] != "team-a" || j.Spec.Template.Labels[clusterv1.WatchLabel] != "team-a" {
				t.Errorf("labels = %v / %v", j.Labels, j.Spec.Template.Labels)
			}
		}},
		{"an object without a watch-filter label gives its Job none", nil, func(t *testing.T, j *batchv1.Job) {
			if _, ok := j.Labels[clusterv1.WatchLabel]; ok {
				t.Errorf("labels = %v", j.Labels)
			}
		}},
		{"the object is the Job's controller owner", nil, func(t *testing.T, j *batchv1.Job) {
			if len(j.OwnerReferences) != 1 || !*j.OwnerReferences[0].Controller || j.OwnerReferences[0].UID != "u1" {
				t.Errorf("ownerReferences = %v", j.OwnerReferences)
			}
		}},
		{"an apply records its inputs hash", nil, func(t *testing.T, j *batchv1.Job) {
			if j.Annotations[jobs.AnnotationInputsHash] != "h1:x" {
				t.Errorf("annotations = %v", j.Annotations)
			}
		}},
		{"a drift check records no inputs hash", func(p *Params) { p.Op = jobs.OpDrift }, func(t *testing.T, j *batchv1.Job) {
			if _, ok := j.Annotations[jobs.AnnotationInputsHash]; ok {
				t.Errorf("annotations = %v", j.Annotations)
			}
		}},
		{"the pod mounts its per-run Secret read-only", nil, func(t *testing.T, j *batchv1.Job) {
			var found bool
			for _, v := range j.Spec.Template.Spec.Volumes {
				if v.Name == "config" && v.Secret != nil && v.Secret.SecretName == "captf-run-captf-c-web-apply-a1-abcdef" {
					found = true
				}
			}
			if !found {
				t.Error("no config volume from the per-run Secret")
			}
		}},
		{"the plan key is mounted only when asked", nil, func(t *testing.T, j *batchv1.Job) {
			for _, v := range j.Spec.Template.Spec.Volumes {
				if v.Name == "plan-key" {
					t.Error("plan key mounted")
				}
			}
			if slices.ContainsFunc(j.Spec.Template.Spec.Containers[0].Command, func(a string) bool { return strings.HasPrefix(a, "--plan-key-file") }) {
				t.Error("plan key flag passed")
			}
		}},
		{"a plan Job mounts the plan key read-only with mode 0440", func(p *Params) { p.Op, p.PlanKeySecret = jobs.OpPlan, "captf-plankey-c-web" }, func(t *testing.T, j *batchv1.Job) {
			var ok bool
			for _, v := range j.Spec.Template.Spec.Volumes {
				ok = ok || v.Name == "plan-key" && v.Secret.SecretName == "captf-plankey-c-web" && *v.Secret.DefaultMode == 0o440
			}
			if !ok || !slices.Contains(j.Spec.Template.Spec.Containers[0].Command, "--plan-key-file="+PlanKeyFile) {
				t.Errorf("plan key not mounted: %v", j.Spec.Template.Spec.Volumes)
			}
		}},
		{"an identity's credentials come as environment and as 0440 files", func(p *Params) { p.CredentialsSecret = "captf-creds-aws" }, func(t *testing.T, j *batchv1.Job) {
			c := j.Spec.Template.Spec.Containers[0]
			if len(c.EnvFrom) != 1 || c.EnvFrom[0].SecretRef == nil || c.EnvFrom[0].SecretRef.Name != "captf-creds-aws" {
				t.Errorf("envFrom = %+v", c.EnvFrom)
			}
			var ok bool
			for _, v := range j.Spec.Template.Spec.Volumes {
				ok = ok || v.Name == "credentials" && v.Secret.SecretName == "captf-creds-aws" && *v.Secret.DefaultMode == 0o440
			}
			mounted := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == CredentialsDir && m.ReadOnly })
			if !ok || !mounted {
				t.Errorf("credentials not mounted read-only at %s: %v %v", CredentialsDir, j.Spec.Template.Spec.Volumes, c.VolumeMounts)
			}
		}},
		{"a CLI configuration Secret is mounted read-only, its tofurc key only, and passed to the runner", func(p *Params) {
			p.Policy.CLIConfigSecretRef = &infrav1.SourceReference{Name: "registry-mirror"}
		}, func(t *testing.T, j *batchv1.Job) {
			c := j.Spec.Template.Spec.Containers[0]
			var ok bool
			for _, v := range j.Spec.Template.Spec.Volumes {
				ok = ok || v.Name == "cli-config" && v.Secret != nil && v.Secret.SecretName == "registry-mirror" && *v.Secret.DefaultMode == 0o440 &&
					slices.Equal(v.Secret.Items, []corev1.KeyToPath{{Key: "tofurc", Path: "tofurc"}})
			}
			mounted := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
				return m.Name == "cli-config" && m.MountPath == CLIConfigDir && m.ReadOnly
			})
			if !ok || !mounted {
				t.Errorf("CLI configuration not mounted read-only at %s: %v %v", CLIConfigDir, j.Spec.Template.Spec.Volumes, c.VolumeMounts)
			}
			if CLIConfigFile != "/captf/cli-config/tofurc" || !slices.Contains(c.Command, "--cli-config="+CLIConfigFile) {
				t.Errorf("command %q does not pass --cli-config=%s", c.Command, CLIConfigFile)
			}
		}},
		{"without a CLI configuration Secret nothing is mounted and no flag is passed", nil, func(t *testing.T, j *batchv1.Job) {
			for _, v := range j.Spec.Template.Spec.Volumes {
				if v.Name == "cli-config" {
					t.Error("CLI configuration mounted")
				}
			}
			if slices.ContainsFunc(j.Spec.Template.Spec.Containers[0].Command, func(a string) bool { return strings.HasPrefix(a, "--cli-config") }) {
				t.Error("CLI configuration flag passed")
			}
		}},
		{"without an identity no credentials are given", nil, func(t *testing.T, j *batchv1.Job) {
			if len(j.Spec.Template.Spec.Containers[0].EnvFrom) != 0 {
				t.Errorf("envFrom = %+v", j.Spec.Template.Spec.Containers[0].EnvFrom)
			}
		}},
		{"the runner gets the op, the state suffix, the state Secret's owner labels and the lock timeout", nil, func(t *testing.T, j *batchv1.Job) {
			cmd := j.Spec.Template.Spec.Containers[0].Command
			labels := `--backend-config=labels={"captf.infrastructure.cluster.x-k8s.io/owner-kind":"TerraformCluster","captf.infrastructure.cluster.x-k8s.io/owner-name":"web","captf.io/managed":"true","cluster.x-k8s.io/cluster-name":"prod","clusterctl.cluster.x-k8s.io/move":""}`
			for _, want := range []string{RunnerPath, "run", "--op=apply", "--backend-config=secret_suffix=0123456789abcdef-c", "--backend-config=namespace=ns", labels, "--lock-timeout=300s", "--stop-timeout=570s"} {
				if !slices.Contains(cmd, want) {
					t.Errorf("command %v lacks %s", cmd, want)
				}
			}
		}},
		{"the init container copies the runner from the runner image", nil, func(t *testing.T, j *batchv1.Job) {
			init := j.Spec.Template.Spec.InitContainers[0]
			if init.Image != "captf/manager:dev" || !slices.Equal(init.Command, []string{"/runner", "copy", RunnerPath}) {
				t.Errorf("init container = %+v", init)
			}
		}},
		{"TF_ and KUBE_ variables of the policy are dropped", func(p *Params) {
			p.Policy.Env = []corev1.EnvVar{{Name: "TF_LOG", Value: "TRACE"}, {Name: "KUBE_TOKEN", Value: "x"}, {Name: "HOME", Value: "/"}, {Name: "REGION", Value: "eu"}}
		}, func(t *testing.T, j *batchv1.Job) {
			env := map[string]string{}
			for _, e := range j.Spec.Template.Spec.Containers[0].Env {
				env[e.Name] = e.Value
			}
			if _, ok := env["TF_LOG"]; ok || env["HOME"] != WorkDir || env["REGION"] != "eu" || env["KUBE_TOKEN"] != "" || env["TF_IN_AUTOMATION"] != "1" {
				t.Errorf("env = %v", env)
			}
		}},
		{"the result is read from the termination message file", nil, func(t *testing.T, j *batchv1.Job) {
			c := j.Spec.Template.Spec.Containers[0]
			if c.TerminationMessagePolicy != corev1.TerminationMessageReadFile || c.TerminationMessagePath != TerminationMessagePath {
				t.Errorf("termination message = %s %s", c.TerminationMessagePolicy, c.TerminationMessagePath)
			}
		}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			p := params()
			if tc.change != nil {
				tc.change(&p)
			}
			tc.check(t, Build(p))
		})
	}
}

func TestDroppedEnv(t *testing.T) {
	got := DroppedEnv(infrav1.JobPolicy{Env: []corev1.EnvVar{{Name: "TF_LOG"}, {Name: "A"}, {Name: "KUBERNETES_SERVICE_HOST"}}})
	if !slices.Equal(got, []string{"TF_LOG", "KUBERNETES_SERVICE_HOST"}) {
		t.Fatalf("DroppedEnv = %v", got)
	}
}

// TestPolicyCannotRedirectTheCLIConfiguration: each variable through which OpenTofu finds a CLI
// configuration, credentials or plugins is left out of the Job and reported.
func TestPolicyCannotRedirectTheCLIConfiguration(t *testing.T) {
	for _, name := range []string{
		"TF_CLI_CONFIG_FILE", "TERRAFORM_CONFIG", "TF_TOKEN_registry_example_com", "TF_PLUGIN_CACHE_DIR",
		"XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR",
	} {
		t.Run(name, func(t *testing.T) {
			p := params()
			p.Policy.Env = []corev1.EnvVar{{Name: name, Value: "/user/chosen"}}
			for _, e := range Build(p).Spec.Template.Spec.Containers[0].Env {
				if e.Name == name {
					t.Errorf("the Job sets %s=%s", e.Name, e.Value)
				}
			}
			if got := DroppedEnv(p.Policy); !slices.Equal(got, []string{name}) {
				t.Errorf("DroppedEnv = %v, want [%s]", got, name)
			}
		})
	}
}

func TestResourcesReplaceTheDefaultWhole(t *testing.T) {
	p := params()
	p.Policy.Resources = &corev1.ResourceRequirements{}
	if r := Build(p).Spec.Template.Spec.Containers[0].Resources; len(r.Requests) != 0 || len(r.Limits) != 0 {
		t.Fatalf("resources = %v", r)
	}
	p.Policy.Resources = nil
	if r := Build(p).Spec.Template.Spec.Containers[0].Resources; r.Limits.Memory().String() != "2Gi" {
		t.Fatalf("default resources = %v", r)
	}
}

// TestRunnerArgs pins the exact arguments of `runner run` for each op and option, in order.
func TestRunnerArgs(t *testing.T) {
	common := func(op, lockTimeout, labels string) []string {
		return []string{
			RunnerPath, "run",
			"--op=" + op,
			"--bin=/captf/runtime",
			"--module=/captf/module",
			"--providers=/captf/providers",
			"--workdir=/captf/work",
			"--config=/captf/config",
			"--result=/dev/termination-log",
			"--image=modules/net:v1",
			"--lock-timeout=" + lockTimeout,
			"--stop-timeout=570s",
			"--backend-config=secret_suffix=0123456789abcdef-c",
			"--backend-config=namespace=ns",
			"--backend-config=in_cluster_config=true",
			"--backend-config=labels=" + labels,
		}
	}
	const (
		prod      = `{"captf.infrastructure.cluster.x-k8s.io/owner-kind":"TerraformCluster","captf.infrastructure.cluster.x-k8s.io/owner-name":"web","captf.io/managed":"true","cluster.x-k8s.io/cluster-name":"prod","clusterctl.cluster.x-k8s.io/move":""}`
		noCluster = `{"captf.infrastructure.cluster.x-k8s.io/owner-kind":"TerraformCluster","captf.infrastructure.cluster.x-k8s.io/owner-name":"web","captf.io/managed":"true","clusterctl.cluster.x-k8s.io/move":""}`
	)
	for _, tc := range []struct {
		name   string
		change func(*Params)
		want   []string
	}{
		{"apply", nil, common("apply", "300s", prod)},
		{"plan with the plan key", func(p *Params) { p.Op, p.PlanKeySecret = jobs.OpPlan, "captf-plankey-c-web" },
			append(common("plan", "300s", prod), "--plan-key-file=/captf/plan-key/key")},
		{"drift without a cluster name", func(p *Params) { p.Op, p.ClusterName = jobs.OpDrift, "" },
			common("drift", "300s", noCluster)},
		{"force unlock", func(p *Params) { p.ForceUnlock = "lock-1" },
			append(common("apply", "300s", prod), "--force-unlock=lock-1")},
		{"guarded apply", func(p *Params) { p.GuardDeletes = true },
			append(common("apply", "300s", prod), "--guard-deletes", "--inputs-hash=h1:x")},
		{"an allowed hash without the guard is not passed", func(p *Params) { p.AllowDeletesHash = "h1:x" },
			common("apply", "300s", prod)},
		{"every apply option", func(p *Params) {
			p.PlanKeySecret = "captf-plankey-c-web"
			p.Policy.LockTimeoutSeconds = ptr.To[int64](0)
			p.ForceUnlock, p.GuardDeletes, p.AllowDeletesHash, p.ExpectPlan = "lock-1", true, "h1:x", "p3:abc"
		}, append(common("apply", "0s", prod),
			"--plan-key-file=/captf/plan-key/key", "--force-unlock=lock-1", "--guard-deletes", "--inputs-hash=h1:x",
			"--allow-deletes-hash=h1:x", "--expect-plan=p3:abc")},
		{"restore", func(p *Params) {
			p.Op, p.Restore = jobs.OpRestore, &Restore{Backup: "captf-backup-c-web-3", Resources: 4}
		}, append(common("restore", "300s", prod), "--restore-chunks=1", "--restore-resources=4")},
		{"a CLI configuration", func(p *Params) { p.Policy.CLIConfigSecretRef = &infrav1.SourceReference{Name: "registry-mirror"} },
			append(common("apply", "300s", prod), "--cli-config=/captf/cli-config/tofurc")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := params()
			if tc.change != nil {
				tc.change(&p)
			}
			if got := Build(p).Spec.Template.Spec.Containers[0].Command; !slices.Equal(got, tc.want) {
				t.Errorf("command\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestRestoreProjectsTheBackupAsOneChunk(t *testing.T) {
	p := params()
	p.Op, p.Restore = jobs.OpRestore, &Restore{Backup: "captf-backup-c-web-3", Resources: 4}
	var config *corev1.Volume
	for _, v := range Build(p).Spec.Template.Spec.Volumes {
		if v.Name == "config" {
			config = &v
		}
	}
	if config == nil || config.Projected == nil || len(config.Projected.Sources) != 2 {
		t.Fatalf("config volume = %+v, want the per-run Secret and the backup projected", config)
	}
	run, backup := config.Projected.Sources[0].Secret, config.Projected.Sources[1].Secret
	if run.Name != jobs.RunSecretName(p.Name) || len(run.Items) != 0 {
		t.Errorf("per-run source = %+v", run)
	}
	want := []corev1.KeyToPath{{Key: BackupStateKey, Path: "restore/0"}}
	if backup.Name != "captf-backup-c-web-3" || !slices.Equal(backup.Items, want) {
		t.Errorf("backup source = %+v, want %s at restore/0", backup, BackupStateKey)
	}
}

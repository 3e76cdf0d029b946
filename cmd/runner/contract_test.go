package main

import (
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/jobspec"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/runner"
)

// parseRun parses the arguments that follow `runner run` with the runner's own flag set, as
// main does, and returns the options and the names of the flags they set.
func parseRun(args []string) (runner.Options, []string, error) {
	o := runner.NewOptions()
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return o, nil, err
	}
	if fs.NArg() != 0 {
		return o, nil, fmt.Errorf("run takes no arguments, got %q", fs.Args())
	}
	var set []string
	fs.Visit(func(f *pflag.Flag) { set = append(set, f.Name) })
	return o, set, nil
}

func TestParseRunRefusesWhatTheRunnerDoesNotDefine(t *testing.T) {
	for _, args := range [][]string{
		{"--op=apply", "--event-object=x"},
		{"--op=apply", "--plugin-cache-dir=/captf/providers"},
		{"--op=apply", "--guard-deletes=maybe"},
		{"--op=apply", "extra"},
	} {
		if _, _, err := parseRun(args); err == nil {
			t.Errorf("parseRun(%q) accepted it", args)
		}
	}
}

// TestJobArgsParse is the contract between the Job and the runner: the command jobspec.Build
// gives each container names a runner command, and the source container's flags parse with the
// runner's own flag set into options that validate and carry what the Job was built from.
// Every flag the runner defines is passed by some Job.
func TestJobArgsParse(t *testing.T) {
	base := func() jobspec.Params {
		return jobspec.Params{
			Kind: jobs.KindCluster, Namespace: "ns", ObjectName: "web", ClusterName: "prod",
			Owner: metav1.OwnerReference{Kind: "TerraformCluster", Name: "web", UID: "u1", Controller: ptr.To(true)},
			Name:  "captf-c-web-apply-a1-abcdef", Op: jobs.OpApply, Attempt: 1, InputsHash: "h1:x",
			Source: infrav1.SourceSpec{Image: "modules/net:v1"}, RunnerImage: "captf/manager:dev",
			StateSuffix: "0123456789abcdef-c",
		}
	}
	type check func(*testing.T, runner.Options)
	cases := []struct {
		name   string
		change func(*jobspec.Params)
		check  check
	}{
		{"plan", func(p *jobspec.Params) { p.Op, p.PlanKeySecret = jobs.OpPlan, "captf-plankey-c-web" }, func(t *testing.T, o runner.Options) {
			if o.PlanKeyFile != jobspec.PlanKeyFile {
				t.Errorf("plan key file %q", o.PlanKeyFile)
			}
		}},
		{"destroy", func(p *jobspec.Params) { p.Op = jobs.OpDestroy }, nil},
		{"refresh", func(p *jobspec.Params) { p.Op = jobs.OpRefresh }, nil},
		{"drift", func(p *jobspec.Params) { p.Op, p.ClusterName = jobs.OpDrift, "" }, nil},
		{"apply", func(p *jobspec.Params) { p.Policy.LockTimeoutSeconds = ptr.To[int64](42) }, func(t *testing.T, o runner.Options) {
			if o.LockTimeout != 42*time.Second || o.GuardDeletes || o.ExpectPlan != "" || o.ForceUnlock != "" {
				t.Errorf("options %+v", o)
			}
		}},
		{"apply releasing a stale lock", func(p *jobspec.Params) { p.ForceUnlock = "lock-1" }, func(t *testing.T, o runner.Options) {
			if o.ForceUnlock != "lock-1" {
				t.Errorf("force unlock %q", o.ForceUnlock)
			}
		}},
		{"guarded apply", func(p *jobspec.Params) { p.GuardDeletes = true }, func(t *testing.T, o runner.Options) {
			if !o.GuardDeletes || o.InputsHash != "h1:x" || o.AllowDeletesHash != "" {
				t.Errorf("guard %v, inputs %q, allowed %q", o.GuardDeletes, o.InputsHash, o.AllowDeletesHash)
			}
		}},
		{"guarded apply of approved deletes", func(p *jobspec.Params) { p.GuardDeletes, p.AllowDeletesHash = true, "h1:x" }, func(t *testing.T, o runner.Options) {
			if !o.GuardDeletes || o.InputsHash != "h1:x" || o.AllowDeletesHash != "h1:x" {
				t.Errorf("guard %v, inputs %q, allowed %q", o.GuardDeletes, o.InputsHash, o.AllowDeletesHash)
			}
		}},
		{"approved apply", func(p *jobspec.Params) { p.ExpectPlan, p.PlanKeySecret = jobs.EmptyPlanHash, "captf-plankey-c-web" }, func(t *testing.T, o runner.Options) {
			if o.ExpectPlan != jobs.EmptyPlanHash || o.PlanKeyFile != jobspec.PlanKeyFile {
				t.Errorf("expect plan %q, key %q", o.ExpectPlan, o.PlanKeyFile)
			}
		}},
		{"apply with a policy variable from a Secret", func(p *jobspec.Params) {
			p.Policy.Env = []corev1.EnvVar{
				{Name: "REGION", Value: "eu"},
				{Name: "CLOUD_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cloud"}, Key: "token"}}},
				{Name: "TF_VAR_dropped", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cloud"}, Key: "token"}}},
			}
			p.CredentialsSecret = "captf-creds-aws"
		}, func(t *testing.T, o runner.Options) {
			if !slices.Equal(o.SecretEnv, []string{"CLOUD_TOKEN"}) {
				t.Errorf("secret env %q, want the policy variable from a Secret that the Job keeps", o.SecretEnv)
			}
			if o.Credentials != jobspec.CredentialsDir {
				t.Errorf("the runner reads credentials from %q; the Job mounts them at %q", o.Credentials, jobspec.CredentialsDir)
			}
		}},
		{"a run with its own CLI configuration", func(p *jobspec.Params) {
			p.Policy.CLIConfigSecretRef = &infrav1.SourceReference{Name: "registry-mirror"}
		}, func(t *testing.T, o runner.Options) {
			if o.CLIConfig != jobspec.CLIConfigFile {
				t.Errorf("CLI configuration %q, want %q", o.CLIConfig, jobspec.CLIConfigFile)
			}
		}},
		{"a run whose state is encrypted, read in the clear once", func(p *jobspec.Params) {
			p.StateKeys = &jobspec.StateKeys{Secret: "state-keys", IDs: []string{"one", "two"}, Current: "two", AcceptPlaintext: true}
		}, func(t *testing.T, o runner.Options) {
			if o.StateKeys != jobspec.StateKeysDir || o.StateKey != "two" || !o.StateAcceptPlaintext {
				t.Errorf("state keys %q, key %q, accept plaintext %v", o.StateKeys, o.StateKey, o.StateAcceptPlaintext)
			}
		}},
		{"restore of a backup in chunks", func(p *jobspec.Params) {
			p.Op, p.Restore = jobs.OpRestore, &jobspec.Restore{Backup: "captf-backup-c-web-4", Resources: 4, Chunks: 3}
		}, func(t *testing.T, o runner.Options) {
			if o.RestoreChunks != 3 {
				t.Errorf("restore chunks %d, want 3", o.RestoreChunks)
			}
		}},
		{"restore", func(p *jobspec.Params) {
			p.Op, p.Restore = jobs.OpRestore, &jobspec.Restore{Backup: "captf-backup-c-web-3", Resources: 4}
		}, func(t *testing.T, o runner.Options) {
			if o.RestoreChunks != 1 || o.RestoreResources != 4 {
				t.Errorf("restore chunks %d, resources %d", o.RestoreChunks, o.RestoreResources)
			}
		}},
	}
	passed := map[string]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := base()
			tc.change(&p)
			spec := jobspec.Build(p).Spec.Template.Spec

			init := spec.InitContainers[0].Command
			if cmd, rest, err := newCommand(io.Discard, io.Discard).Find(init[1:]); err != nil || cmd.Name() != "copy" || cmd.ValidateArgs(rest) != nil {
				t.Errorf("init container command %q is not `runner copy <dest>`: %v", init, err)
			}

			command := spec.Containers[0].Command
			if command[0] != jobspec.RunnerPath {
				t.Fatalf("source container runs %q, not the installed runner", command[0])
			}
			cmd, rest, err := newCommand(io.Discard, io.Discard).Find(command[1:])
			if err != nil || cmd.Name() != "run" {
				t.Fatalf("source container command %q is not `runner run`: %v", command, err)
			}
			o, set, err := parseRun(rest)
			if err != nil {
				t.Fatalf("the runner refuses the Job's arguments %q: %v", rest, err)
			}
			for _, name := range set {
				passed[name] = true
			}
			if err := o.Validate(); err != nil {
				t.Fatalf("the Job's arguments do not validate: %v", err)
			}
			if o.Op != p.Op || !slices.Equal(o.Bin, []string{jobspec.RuntimePath}) || o.Module != jobspec.ModuleDir || o.Providers != jobspec.ProvidersDir ||
				o.Workdir != jobspec.WorkDir || o.Config != jobspec.ConfigDir || o.ResultFile != jobspec.TerminationMessagePath ||
				o.Image != p.Source.Image || o.StopTimeout != (jobspec.TerminationGracePeriodSeconds-30)*time.Second ||
				len(o.BackendConfig) != 4 {
				t.Errorf("options %+v do not match the Job", o)
			}
			if tc.check != nil {
				tc.check(t, o)
			}
		})
	}

	defined := runner.NewOptions()
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	defined.AddFlags(fs)
	fs.VisitAll(func(f *pflag.Flag) {
		if !passed[f.Name] {
			t.Errorf("no Job passes --%s: pass it from jobspec.Build or remove it from the runner", f.Name)
		}
	})
}

package runner

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/captf/captf/jobs"
)

// fakeRuntime stands in for OpenTofu where a test is about the runner, not the runtime. It
// records its arguments and environment, prints canned output, and can hang in one command so
// a test can stop it. With FAKE_BODY, plan, apply and destroy print a plan body line holding it
// and their summary line; a command named by FAKE_FAIL fails, printing FAKE_SAY in its error
// and on stdout.
const fakeRuntime = `#!/bin/sh
echo "$*" >> "$FAKE_DIR/argv"
cmd=$1
[ "$cmd" = state ] && cmd="state-$2"
case "$cmd" in
version) echo '{"terraform_version":"9.9.9"}'; exit 0 ;;
init) env > "$FAKE_DIR/env" ;;
show) cat "$FAKE_DIR/show.json" ;;
esac
if [ -n "$FAKE_BODY" ]; then
  case "$cmd" in
  plan|apply|destroy) echo "  # a will be changed"; printf '  ~ name = "%s"\n' "$FAKE_BODY" ;;
  esac
  case "$cmd" in
  plan) echo "Plan: 1 to add, 0 to change, 0 to destroy." ;;
  apply) echo "Apply complete! Resources: 1 added, 0 changed, 0 destroyed." ;;
  destroy) echo "Destroy complete! Resources: 1 destroyed." ;;
  esac
fi
if [ "$cmd" = "$FAKE_FAIL" ]; then
  if [ -n "$FAKE_SAY" ]; then
    printf 'note: %s\n' "$FAKE_SAY"
    printf 'Error: %s broke: %s\n' "$cmd" "$FAKE_SAY" >&2
  else
    echo "Error: $cmd broke" >&2
  fi
  exit 1
fi
if [ "$cmd" = "$FAKE_HANG" ]; then
  if [ -n "$FAKE_IGNORE_TERM" ]; then
    trap '' TERM
  else
    trap 'echo term > "$FAKE_DIR/got-term"; exit 143' TERM
  fi
  echo started > "$FAKE_DIR/started"
  sleep 60 &
  wait
  wait
  exit 0
fi
[ "$cmd" = plan ] && exit "${FAKE_PLAN_EXIT:-0}"
exit 0
`

// syncBuffer is a log a test can read while the runner writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type fakeRun struct {
	dir            string
	opts           Options
	stdout, stderr *syncBuffer
}

// newFakeRun prepares a run with the fake runtime, a one-file module and a rendered config.
func newFakeRun(t *testing.T, op jobs.Op, env ...string) *fakeRun {
	t.Helper()
	dir := t.TempDir()
	for path, content := range map[string]string{
		"bin/tofu":                     fakeRuntime,
		"module/main.tf":               "",
		"config/main.tf.json":          "{}",
		"config/terraform.tfvars.json": "{}",
	} {
		p := filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f := &fakeRun{dir: dir, stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	o := NewOptions()
	o.Op = op
	o.Bin = []string{filepath.Join(dir, "bin/tofu")}
	o.Module = filepath.Join(dir, "module")
	o.Config = filepath.Join(dir, "config")
	o.Workdir = filepath.Join(dir, "work")
	o.Providers = filepath.Join(dir, "no-providers")
	o.ResultFile = filepath.Join(dir, "result")
	o.PlanKeyFile = filepath.Join(dir, "key")
	o.StopTimeout = 30 * time.Second
	o.Environ = append([]string{"PATH=" + os.Getenv("PATH"), "FAKE_DIR=" + dir}, env...)
	o.Stdout, o.Stderr = f.stdout, f.stderr
	f.opts = o
	return f
}

func (f *fakeRun) run(ctx context.Context, t *testing.T) (jobs.RunnerResult, int) {
	t.Helper()
	if err := f.opts.Validate(); err != nil {
		t.Fatal(err)
	}
	res, code := Run(ctx, f.opts)
	doc, err := os.ReadFile(f.opts.ResultFile)
	if err != nil {
		t.Fatalf("reading the result file: %v", err)
	}
	parsed, err := jobs.ParseRunnerResult(doc)
	if err != nil {
		t.Fatalf("the result file does not parse: %v\n%s", err, doc)
	}
	if parsed.Op != f.opts.Op {
		t.Errorf("result op %q, want %q", parsed.Op, f.opts.Op)
	}
	return res, code
}

func (f *fakeRun) argv(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(f.dir, "argv"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

func (f *fakeRun) writeKey(t *testing.T, n int) {
	t.Helper()
	if err := os.WriteFile(f.opts.PlanKeyFile, []byte(strings.Repeat("k", n)), 0o440); err != nil {
		t.Fatal(err)
	}
}

func stepNames(r jobs.RunnerResult) []string {
	var names []string
	for _, s := range r.Steps {
		names = append(names, s.Name)
	}
	return names
}

// waitForFile polls for a file until the deadline.
func waitForFile(t *testing.T, path string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s did not appear within %s", path, within)
}

func TestPlanKeyRules(t *testing.T) {
	tests := []struct {
		name      string
		op        jobs.Op
		expect    string
		keyBytes  int // 0: no key file
		wantError bool
	}{
		{name: "a plan without a key fails before any step", op: jobs.OpPlan, wantError: true},
		{name: "a plan with a short key fails before any step", op: jobs.OpPlan, keyBytes: 31, wantError: true},
		{name: "a plan with a 32-byte key runs", op: jobs.OpPlan, keyBytes: 32},
		{name: "an approved apply without a key fails before any step", op: jobs.OpApply, expect: jobs.EmptyPlanHash, wantError: true},
		{name: "an approved apply with a key runs", op: jobs.OpApply, expect: jobs.EmptyPlanHash, keyBytes: 32},
		{name: "an unapproved apply needs no key", op: jobs.OpApply},
		{name: "a destroy needs no key", op: jobs.OpDestroy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeRun(t, tt.op)
			f.opts.ExpectPlan = tt.expect
			if tt.keyBytes > 0 {
				f.writeKey(t, tt.keyBytes)
			}
			if err := os.WriteFile(filepath.Join(f.dir, "show.json"), []byte(`{"format_version":"1.2"}`), 0o644); err != nil {
				t.Fatal(err)
			}
			res, code := f.run(context.Background(), t)
			if !tt.wantError {
				if code != ExitOK || res.Error != nil {
					t.Fatalf("exit %d, error %+v; log:\n%s", code, res.Error, f.stderr)
				}
				return
			}
			if code != ExitFailure || res.Error == nil || res.Error.Kind != jobs.ErrorKindStep || res.Error.Step != StepPlanKey {
				t.Fatalf("exit %d, error %+v; want a plan-key step error", code, res.Error)
			}
			if len(res.Steps) != 0 {
				t.Errorf("steps ran: %v", stepNames(res))
			}
			if _, err := os.Stat(filepath.Join(f.dir, "argv")); err == nil {
				t.Errorf("the runtime was started: %q", f.argv(t))
			}
		})
	}
}

func TestImageLayout(t *testing.T) {
	tests := []struct {
		name string
		mut  func(f *fakeRun)
	}{
		{"a module without configuration files", func(f *fakeRun) { _ = os.Remove(filepath.Join(f.opts.Module, "main.tf")) }},
		{"a runtime that is not executable", func(f *fakeRun) { _ = os.Chmod(f.opts.Bin[0], 0o644) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeRun(t, jobs.OpApply)
			tt.mut(f)
			res, code := f.run(context.Background(), t)
			if code != ExitFailure || res.Error == nil || res.Error.Kind != jobs.ErrorKindImageLayout {
				t.Fatalf("exit %d, error %+v; want image-layout", code, res.Error)
			}
			if len(res.Steps) != 0 {
				t.Errorf("steps ran: %v", stepNames(res))
			}
		})
	}
}

func TestStepsPerOp(t *testing.T) {
	lock := "-lock-timeout=300s"
	tests := []struct {
		name      string
		op        jobs.Op
		mut       func(o *Options)
		planExit  string
		wantSteps []string
		wantArgv  []string
	}{
		{
			name:      "apply: init, validate, apply",
			op:        jobs.OpApply,
			wantSteps: []string{"init", "validate", "apply"},
			wantArgv: []string{
				"version -json",
				"init -input=false -no-color " + lock + " -backend-config=secret_suffix=abc-c -backend-config=namespace=ns",
				"validate -json -no-color",
				"apply -input=false -no-color " + lock + " -auto-approve -var-file=terraform.tfvars.json",
			},
		},
		{
			name:      "a guarded apply without changes skips show and apply",
			op:        jobs.OpApply,
			mut:       func(o *Options) { o.GuardDeletes, o.InputsHash = true, "h1:x" },
			planExit:  "0",
			wantSteps: []string{"init", "validate", "plan"},
		},
		{
			name:      "a guarded apply with changes plans, shows and applies the plan file",
			op:        jobs.OpApply,
			mut:       func(o *Options) { o.GuardDeletes, o.InputsHash = true, "h1:x" },
			planExit:  "2",
			wantSteps: []string{"init", "validate", "plan", "show", "apply"},
		},
		{
			name:      "plan: init, validate, plan, show",
			op:        jobs.OpPlan,
			wantSteps: []string{"init", "validate", "plan", "show"},
		},
		{
			name:      "destroy: init, destroy",
			op:        jobs.OpDestroy,
			wantSteps: []string{"init", "destroy"},
		},
		{
			name:      "refresh: init, apply -refresh-only",
			op:        jobs.OpRefresh,
			wantSteps: []string{"init", "refresh"},
		},
		{
			name:      "drift: init, refresh, plan without refresh, show when it changes",
			op:        jobs.OpDrift,
			planExit:  "2",
			wantSteps: []string{"init", "refresh", "plan", "show"},
		},
		{
			name:      "force-unlock runs right after init",
			op:        jobs.OpDestroy,
			mut:       func(o *Options) { o.ForceUnlock = "lock-id" },
			wantSteps: []string{"init", "force-unlock", "destroy"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeRun(t, tt.op, "FAKE_PLAN_EXIT="+tt.planExit)
			f.opts.BackendConfig = []string{"secret_suffix=abc-c", "namespace=ns"}
			f.writeKey(t, 32)
			if tt.mut != nil {
				tt.mut(&f.opts)
			}
			if err := os.WriteFile(filepath.Join(f.dir, "show.json"), []byte(`{"format_version":"1.2","resource_changes":[{"address":"a","mode":"managed","change":{"actions":["update"],"before":{"n":1},"after":{"n":2}}}]}`), 0o644); err != nil {
				t.Fatal(err)
			}
			res, code := f.run(context.Background(), t)
			if code != ExitOK || res.Error != nil {
				t.Fatalf("exit %d, error %+v; log:\n%s", code, res.Error, f.stderr)
			}
			if got := stepNames(res); !slices.Equal(got, tt.wantSteps) {
				t.Errorf("steps = %v, want %v", got, tt.wantSteps)
			}
			if tt.wantArgv != nil {
				if got := f.argv(t); !slices.Equal(got, tt.wantArgv) {
					t.Errorf("argv =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.wantArgv, "\n"))
				}
			}
			if res.Runtime == nil || res.Runtime.Version != "9.9.9" {
				t.Errorf("runtime = %+v, want version 9.9.9 from version -json", res.Runtime)
			}
		})
	}
}

func TestRuntimeSeesScrubbedEnvironment(t *testing.T) {
	f := newFakeRun(t, jobs.OpDestroy, "TF_CLI_CONFIG_FILE=/root/.terraformrc", "KUBE_CONFIG_PATH=/secret/kubeconfig", "TF_VAR_x=value-of-x", "KUBE_NAMESPACE=ns1")
	if _, code := f.run(context.Background(), t); code != ExitOK {
		t.Fatalf("exit %d; log:\n%s", code, f.stderr)
	}
	data, err := os.ReadFile(filepath.Join(f.dir, "env"))
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Split(string(data), "\n")
	for _, want := range []string{"HOME=" + f.opts.Workdir, "TF_DATA_DIR=" + filepath.Join(f.opts.Workdir, ".terraform"), "KUBE_NAMESPACE=ns1"} {
		if !slices.Contains(env, want) {
			t.Errorf("the runtime's environment lacks %s", want)
		}
	}
	for _, gone := range []string{"TF_CLI_CONFIG_FILE=", "KUBE_CONFIG_PATH=", "TF_VAR_x="} {
		for _, kv := range env {
			if strings.HasPrefix(kv, gone) {
				t.Errorf("the runtime sees %s", kv)
			}
		}
	}
	log := f.stderr.String()
	if !strings.Contains(log, "dropped KUBE_CONFIG_PATH, TF_CLI_CONFIG_FILE, TF_VAR_x") {
		t.Errorf("the log does not name the dropped variables:\n%s", log)
	}
	if strings.Contains(log, "value-of-x") || strings.Contains(log, "/secret/kubeconfig") {
		t.Errorf("the log shows a dropped value:\n%s", log)
	}
}

// TestRuntimeSeesOnlyTheRunnersCLIConfiguration runs the fake runtime with a variable of the
// base environment that could point OpenTofu at another CLI configuration, credentials or
// plugins, and checks what the runtime sees: the runner's value, or nothing. OpenTofu reads
// tofurc, *.tfrc and credentials.tfrc.json under XDG_CONFIG_HOME, an implied provider mirror
// under XDG_DATA_HOME, and container registry credentials under XDG_CONFIG_HOME and
// XDG_RUNTIME_DIR.
func TestRuntimeSeesOnlyTheRunnersCLIConfiguration(t *testing.T) {
	tests := []struct {
		name      string
		env       string
		mirror    bool
		cliConfig bool                     // the run has its own CLI configuration (--cli-config)
		want      func(work string) string // the entry the runtime sees; nil when the name is gone
		dropped   bool                     // the log names the variable as dropped
	}{
		{
			name: "XDG_CONFIG_HOME is the work directory's",
			env:  "XDG_CONFIG_HOME=/user/config",
			want: func(work string) string { return "XDG_CONFIG_HOME=" + filepath.Join(work, ".config") },
		},
		{
			name: "XDG_DATA_HOME is the work directory's",
			env:  "XDG_DATA_HOME=/user/data",
			want: func(work string) string { return "XDG_DATA_HOME=" + filepath.Join(work, ".local/share") },
		},
		{
			name: "XDG_CACHE_HOME is the work directory's",
			env:  "XDG_CACHE_HOME=/user/cache",
			want: func(work string) string { return "XDG_CACHE_HOME=" + filepath.Join(work, ".cache") },
		},
		{
			name:    "XDG_RUNTIME_DIR is dropped",
			env:     "XDG_RUNTIME_DIR=/run/user/0",
			dropped: true,
		},
		{
			name:    "TERRAFORM_CONFIG is dropped",
			env:     "TERRAFORM_CONFIG=/user/terraformrc",
			dropped: true,
		},
		{
			name:    "TF_CLI_CONFIG_FILE is dropped when the image has no provider mirror",
			env:     "TF_CLI_CONFIG_FILE=/user/tofurc",
			dropped: true,
		},
		{
			name:   "TF_CLI_CONFIG_FILE is the runner's file when the image has a provider mirror",
			env:    "TF_CLI_CONFIG_FILE=/user/tofurc",
			mirror: true,
			want:   func(work string) string { return "TF_CLI_CONFIG_FILE=" + filepath.Join(work, "cli.tfrc") },
		},
		{
			name:      "TF_CLI_CONFIG_FILE is the runner's copy of the run's own CLI configuration",
			env:       "TF_CLI_CONFIG_FILE=/user/tofurc",
			cliConfig: true,
			want:      func(work string) string { return "TF_CLI_CONFIG_FILE=" + filepath.Join(work, "cli.tfrc") },
		},
		{
			name:    "TF_TOKEN_ registry tokens are dropped",
			env:     "TF_TOKEN_registry_example_com=tok",
			dropped: true,
		},
		{
			name:    "TF_PLUGIN_CACHE_DIR is dropped",
			env:     "TF_PLUGIN_CACHE_DIR=/user/cache",
			dropped: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeRun(t, jobs.OpDestroy, tt.env)
			if tt.mirror {
				f.opts.Providers = filepath.Join(f.dir, "providers")
				if err := os.Mkdir(f.opts.Providers, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if tt.cliConfig {
				f.opts.CLIConfig = filepath.Join(f.dir, "tofurc")
				if err := os.WriteFile(f.opts.CLIConfig, []byte("# the run's\n"), 0o440); err != nil {
					t.Fatal(err)
				}
			}
			if _, code := f.run(context.Background(), t); code != ExitOK {
				t.Fatalf("exit %d; log:\n%s", code, f.stderr)
			}
			data, err := os.ReadFile(filepath.Join(f.dir, "env"))
			if err != nil {
				t.Fatal(err)
			}
			name, _, _ := strings.Cut(tt.env, "=")
			var seen []string
			for _, kv := range strings.Split(string(data), "\n") {
				if strings.HasPrefix(kv, name+"=") {
					seen = append(seen, kv)
				}
			}
			var want []string
			if tt.want != nil {
				want = []string{tt.want(f.opts.Workdir)}
			}
			if !slices.Equal(seen, want) {
				t.Errorf("the runtime sees %q, want %q", seen, want)
			}
			if got := strings.Contains(f.stderr.String(), "dropped "+name); got != tt.dropped {
				t.Errorf("the log names %s as dropped: %v, want %v\n%s", name, got, tt.dropped, f.stderr)
			}
		})
	}
}

// TestRunsOwnCLIConfiguration: --cli-config is the whole CLI configuration. The runtime reads
// a private 0600 copy of it, never the runner's mirror configuration, even when the image has a
// provider mirror; the log names the file, not what it holds.
func TestRunsOwnCLIConfiguration(t *testing.T) {
	const content = "provider_installation {\n  network_mirror {\n    url = \"https://mirror.example/\"\n  }\n}\ncredentials \"mirror.example\" {\n  token = \"secret-token\"\n}\n"
	f := newFakeRun(t, jobs.OpDestroy)
	f.opts.Providers = filepath.Join(f.dir, "providers")
	if err := os.Mkdir(f.opts.Providers, 0o755); err != nil {
		t.Fatal(err)
	}
	// A Secret volume's file is a link into its ..data directory.
	volume := filepath.Join(f.dir, "cli-config")
	if err := os.MkdirAll(filepath.Join(volume, "..data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(volume, "..data", "tofurc"), []byte(content), 0o440); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "tofurc"), filepath.Join(volume, "tofurc")); err != nil {
		t.Fatal(err)
	}
	f.opts.CLIConfig = filepath.Join(volume, "tofurc")
	if _, code := f.run(context.Background(), t); code != ExitOK {
		t.Fatalf("exit %d; log:\n%s", code, f.stderr)
	}
	cli := filepath.Join(f.opts.Workdir, "cli.tfrc")
	info, err := os.Lstat(cli)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Mode().IsRegular() || info.Mode().Perm() != 0o600 {
		t.Errorf("%s is %v, want a regular file with mode 0600", cli, info.Mode())
	}
	if data, _ := os.ReadFile(cli); string(data) != content {
		t.Errorf("%s =\n%s\nwant the run's CLI configuration", cli, data)
	}
	env, _ := os.ReadFile(filepath.Join(f.dir, "env"))
	if !slices.Contains(strings.Split(string(env), "\n"), "TF_CLI_CONFIG_FILE="+cli) {
		t.Errorf("the runtime's environment lacks TF_CLI_CONFIG_FILE=%s", cli)
	}
	log := f.stderr.String()
	if !strings.Contains(log, f.opts.CLIConfig) || strings.Contains(log, "secret-token") {
		t.Errorf("the log should name the file and never its content:\n%s", log)
	}
}

func TestMissingCLIConfigurationFailsPreparation(t *testing.T) {
	f := newFakeRun(t, jobs.OpDestroy)
	f.opts.CLIConfig = filepath.Join(f.dir, "cli-config", "tofurc")
	res, code := f.run(context.Background(), t)
	if code != ExitFailure || res.Error == nil || res.Error.Kind != jobs.ErrorKindStep || res.Error.Step != StepPrepare {
		t.Fatalf("exit %d, error %+v; want a prepare failure", code, res.Error)
	}
	if len(res.Steps) != 0 {
		t.Errorf("steps ran: %v", stepNames(res))
	}
}

func TestProviderMirror(t *testing.T) {
	f := newFakeRun(t, jobs.OpDestroy)
	f.opts.Providers = filepath.Join(f.dir, "providers")
	if err := os.Mkdir(f.opts.Providers, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, code := f.run(context.Background(), t); code != ExitOK {
		t.Fatalf("exit %d; log:\n%s", code, f.stderr)
	}
	data, _ := os.ReadFile(filepath.Join(f.dir, "env"))
	want := "TF_CLI_CONFIG_FILE=" + filepath.Join(f.opts.Workdir, "cli.tfrc")
	if !slices.Contains(strings.Split(string(data), "\n"), want) {
		t.Errorf("the runtime's environment lacks %s", want)
	}
}

func TestShowOutputIsNeverLogged(t *testing.T) {
	f := newFakeRun(t, jobs.OpPlan)
	f.writeKey(t, 32)
	show := `{"format_version":"1.2","resource_changes":[{"address":"a","mode":"managed","change":{"actions":["create"],"before":null,"after":{"pw":"s3cret-value"},"after_sensitive":{"pw":true}}}]}`
	if err := os.WriteFile(filepath.Join(f.dir, "show.json"), []byte(show), 0o644); err != nil {
		t.Fatal(err)
	}
	res, code := f.run(context.Background(), t)
	if code != ExitOK || res.Plan == nil || res.Plan.Counts.Add != 1 || !strings.HasPrefix(res.Plan.Hash, "p3:") {
		t.Fatalf("exit %d, plan %+v; log:\n%s", code, res.Plan, f.stderr)
	}
	doc, _ := os.ReadFile(f.opts.ResultFile)
	for where, text := range map[string]string{"stdout": f.stdout.String(), "stderr": f.stderr.String(), "result": string(doc)} {
		if strings.Contains(text, "s3cret-value") {
			t.Errorf("the %s carries the plan's sensitive value", where)
		}
	}
}

func TestFailedStepTail(t *testing.T) {
	f := newFakeRun(t, jobs.OpApply, "FAKE_FAIL=apply")
	res, code := f.run(context.Background(), t)
	if code != ExitFailure || res.Error == nil {
		t.Fatalf("exit %d, error %+v", code, res.Error)
	}
	want := jobs.RunnerError{Kind: jobs.ErrorKindStep, Step: "apply", Tail: "Error: apply broke"}
	if *res.Error != want {
		t.Errorf("error = %+v, want %+v", *res.Error, want)
	}
	if last := res.Steps[len(res.Steps)-1]; last.Name != "apply" || last.Exit != 1 {
		t.Errorf("last step %+v, want apply exiting 1", last)
	}
}

func TestForceUnlockToleratesAGoneLock(t *testing.T) {
	// The fake prints "Error: force-unlock broke"; a real backend says the lock is gone.
	f := newFakeRun(t, jobs.OpDestroy, "FAKE_FAIL=force-unlock")
	f.opts.ForceUnlock = "id"
	if res, code := f.run(context.Background(), t); code != ExitFailure || res.Error.Step != StepForceUnlock {
		t.Fatalf("an unexplained force-unlock failure: exit %d, error %+v; want a failure", code, res.Error)
	}
	for _, msg := range []string{"state is already unlocked", `lock id "id" does not match existing lock`, `leases.coordination.k8s.io "lock-tfstate-default-x" not found`} {
		if !lockAlreadyGone("Failed to unlock state: " + msg) {
			t.Errorf("lockAlreadyGone(%q) = false", msg)
		}
	}
	if lockAlreadyGone("Failed to unlock state: connection refused") {
		t.Error("lockAlreadyGone accepts a connection error")
	}
}

func TestStopForwardsSIGTERMToTheRuntime(t *testing.T) {
	f := newFakeRun(t, jobs.OpApply, "FAKE_HANG=apply")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		waitForFile(t, filepath.Join(f.dir, "started"), 30*time.Second)
		cancel()
	}()
	start := time.Now()
	res, code := f.run(ctx, t)
	if code != ExitFailure || res.Error == nil || res.Error.Kind != jobs.ErrorKindInterrupted || res.Error.Step != "apply" {
		t.Fatalf("exit %d, error %+v; want interrupted in apply", code, res.Error)
	}
	if _, err := os.Stat(filepath.Join(f.dir, "got-term")); err != nil {
		t.Errorf("the runtime did not receive SIGTERM: %v", err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("stopping took %s; the runtime exits on SIGTERM at once", took)
	}
}

func TestStopKillsARuntimeThatIgnoresSIGTERM(t *testing.T) {
	f := newFakeRun(t, jobs.OpApply, "FAKE_HANG=apply", "FAKE_IGNORE_TERM=1")
	f.opts.StopTimeout = 500 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		waitForFile(t, filepath.Join(f.dir, "started"), 30*time.Second)
		cancel()
	}()
	start := time.Now()
	res, code := f.run(ctx, t)
	if code != ExitFailure || res.Error == nil || res.Error.Kind != jobs.ErrorKindInterrupted {
		t.Fatalf("exit %d, error %+v; want interrupted", code, res.Error)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("stopping took %s, want about the stop timeout", took)
	}
	if !strings.Contains(f.stderr.String(), "killing it") {
		t.Errorf("the log does not say the runtime was killed:\n%s", f.stderr)
	}
}

func TestStopBetweenStepsStartsNoMoreSteps(t *testing.T) {
	f := newFakeRun(t, jobs.OpApply)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, code := f.run(ctx, t)
	if code != ExitFailure || res.Error == nil || res.Error.Kind != jobs.ErrorKindInterrupted || res.Error.Step != "init" {
		t.Fatalf("exit %d, error %+v; want interrupted before init", code, res.Error)
	}
	if len(res.Steps) != 0 {
		t.Errorf("steps ran: %v", stepNames(res))
	}
}

func TestUnwritableResultFails(t *testing.T) {
	f := newFakeRun(t, jobs.OpDestroy)
	f.opts.ResultFile = filepath.Join(f.dir, "missing-dir", "result")
	if _, code := Run(context.Background(), f.opts); code != ExitFailure {
		t.Errorf("exit %d, want %d when the result cannot be written", code, ExitFailure)
	}
}

func TestRunRefusesInvalidOptions(t *testing.T) {
	f := newFakeRun(t, "import")
	if err := os.WriteFile(f.opts.ResultFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res, code := Run(context.Background(), f.opts)
	if code != ExitUsage || res.Error == nil || res.Error.Step != StepFlags {
		t.Fatalf("exit %d, error %+v; want a usage error in flags", code, res.Error)
	}
	doc, _ := os.ReadFile(f.opts.ResultFile)
	if parsed, err := jobs.ParseRunnerResult(doc); err != nil || parsed.Error == nil || parsed.Error.Step != StepFlags {
		t.Errorf("result file %s (%v), want the flags error", doc, err)
	}
}

// A module image that ships a dependency lock file pins its providers: the runner copies the
// lock file into the root module, where OpenTofu reads it, and init may not change it.
func TestAModulesLockFilePinsItsProviders(t *testing.T) {
	for _, row := range []struct {
		name string
		lock bool
	}{
		{"a module with a lock file inits read-only with it", true},
		{"a module without one inits as usual", false},
	} {
		t.Run(row.name, func(t *testing.T) {
			f := newFakeRun(t, jobs.OpDestroy)
			const lock = "# pinned\n"
			if row.lock {
				if err := os.WriteFile(filepath.Join(f.opts.Module, ".terraform.lock.hcl"), []byte(lock), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if _, code := f.run(context.Background(), t); code != ExitOK {
				t.Fatalf("exit %d; log:\n%s", code, f.stderr)
			}
			argv, _ := os.ReadFile(filepath.Join(f.dir, "argv"))
			var initArgs string
			for _, line := range strings.Split(string(argv), "\n") {
				if strings.HasPrefix(line, "init ") {
					initArgs = line
				}
			}
			if got := strings.Contains(initArgs, "-lockfile=readonly"); got != row.lock {
				t.Errorf("init %q: read-only lock file %v, want %v", initArgs, got, row.lock)
			}
			copied, err := os.ReadFile(filepath.Join(f.opts.Workdir, "root", ".terraform.lock.hcl"))
			if row.lock && string(copied) != lock {
				t.Errorf("the root's lock file = %q (%v), want the module's", copied, err)
			}
			if !row.lock && err == nil {
				t.Errorf("the root has a lock file the module did not ship")
			}
		})
	}
}

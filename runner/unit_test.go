package runner

import (
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/captf/captf/jobs"
)

func TestRuntimeEnv(t *testing.T) {
	const work = "/captf/work"
	tests := []struct {
		name        string
		base        []string
		extra       map[string]string
		want        []string // entries that must be present
		absent      []string // names that must not be present
		wantDropped []string
	}{
		{
			name:        "TF_ variables are dropped",
			base:        []string{"TF_CLI_CONFIG_FILE=/root/.terraformrc", "TF_VAR_password=hunter2", "TF_LOG=TRACE"},
			absent:      []string{"TF_CLI_CONFIG_FILE", "TF_VAR_password", "TF_LOG"},
			wantDropped: []string{"TF_CLI_CONFIG_FILE", "TF_LOG", "TF_VAR_password"},
		},
		{
			name:        "KUBE_ variables are dropped",
			base:        []string{"KUBE_CONFIG_PATH=/x", "KUBE_TOKEN=t"},
			absent:      []string{"KUBE_CONFIG_PATH", "KUBE_TOKEN"},
			wantDropped: []string{"KUBE_CONFIG_PATH", "KUBE_TOKEN"},
		},
		{
			name:        "registry tokens, the plugin cache and reattached providers (TF_) are dropped",
			base:        []string{"TF_TOKEN_registry_example_com=tok", "TF_PLUGIN_CACHE_DIR=/cache", "TF_REATTACH_PROVIDERS={}"},
			absent:      []string{"TF_TOKEN_registry_example_com", "TF_PLUGIN_CACHE_DIR", "TF_REATTACH_PROVIDERS"},
			wantDropped: []string{"TF_PLUGIN_CACHE_DIR", "TF_REATTACH_PROVIDERS", "TF_TOKEN_registry_example_com"},
		},
		{
			name:        "TERRAFORM_CONFIG, the older name of the CLI configuration file, is dropped",
			base:        []string{"TERRAFORM_CONFIG=/user/terraformrc"},
			absent:      []string{"TERRAFORM_CONFIG"},
			wantDropped: []string{"TERRAFORM_CONFIG"},
		},
		{
			name:        "XDG_RUNTIME_DIR, where registry credentials are looked for, is dropped",
			base:        []string{"XDG_RUNTIME_DIR=/run/user/0"},
			absent:      []string{"XDG_RUNTIME_DIR"},
			wantDropped: []string{"XDG_RUNTIME_DIR"},
		},
		{
			name: "XDG_CONFIG_HOME is forced into the work directory",
			base: []string{"XDG_CONFIG_HOME=/user/config"},
			want: []string{"XDG_CONFIG_HOME=" + work + "/.config"},
		},
		{
			name: "XDG_DATA_HOME is forced into the work directory",
			base: []string{"XDG_DATA_HOME=/user/data"},
			want: []string{"XDG_DATA_HOME=" + work + "/.local/share"},
		},
		{
			name: "XDG_CACHE_HOME is forced into the work directory",
			base: []string{"XDG_CACHE_HOME=/user/cache"},
			want: []string{"XDG_CACHE_HOME=" + work + "/.cache"},
		},
		{
			name: "the XDG base directories are set when absent",
			want: []string{"XDG_CONFIG_HOME=" + work + "/.config", "XDG_DATA_HOME=" + work + "/.local/share", "XDG_CACHE_HOME=" + work + "/.cache"},
		},
		{
			name: "TF_IN_AUTOMATION, TF_INPUT and KUBE_NAMESPACE are kept",
			base: []string{"TF_IN_AUTOMATION=yes", "TF_INPUT=false", "KUBE_NAMESPACE=ns1"},
			want: []string{"TF_IN_AUTOMATION=yes", "TF_INPUT=false", "KUBE_NAMESPACE=ns1"},
		},
		{
			name: "HOME and TF_DATA_DIR are forced into the work directory",
			base: []string{"HOME=/root", "TF_DATA_DIR=/elsewhere"},
			want: []string{"HOME=" + work, "TF_DATA_DIR=" + work + "/.terraform"},
			// TF_DATA_DIR is replaced, not dropped, so it is not reported.
		},
		{
			name: "TMPDIR is kept when set",
			base: []string{"TMPDIR=/tmp"},
			want: []string{"TMPDIR=/tmp"},
		},
		{
			name: "TMPDIR defaults into the work directory",
			want: []string{"TMPDIR=" + work + "/tmp"},
		},
		{
			name: "automation defaults are set when absent",
			want: []string{"TF_IN_AUTOMATION=1", "TF_INPUT=0", "CHECKPOINT_DISABLE=1"},
		},
		{
			name: "other variables pass",
			base: []string{"PATH=/bin", "AWS_REGION=eu-west-1"},
			want: []string{"PATH=/bin", "AWS_REGION=eu-west-1"},
		},
		{
			name:  "the runner's own settings win over the base",
			base:  []string{"TF_CLI_CONFIG_FILE=/root/.terraformrc"},
			extra: map[string]string{"TF_CLI_CONFIG_FILE": work + "/cli.tfrc"},
			want:  []string{"TF_CLI_CONFIG_FILE=" + work + "/cli.tfrc"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, dropped, _ := runtimeEnv(tt.base, work, tt.extra)
			for _, w := range tt.want {
				if !slices.Contains(env, w) {
					t.Errorf("env lacks %s: %q", w, env)
				}
			}
			names := map[string]int{}
			for _, kv := range env {
				name, _, _ := strings.Cut(kv, "=")
				names[name]++
			}
			for _, a := range tt.absent {
				if names[a] > 0 {
					t.Errorf("env has %s: %q", a, env)
				}
			}
			for name, n := range names {
				if n > 1 {
					t.Errorf("env sets %s %d times", name, n)
				}
			}
			if !slices.Equal(dropped, tt.wantDropped) {
				t.Errorf("dropped = %q, want %q", dropped, tt.wantDropped)
			}
			for _, d := range dropped {
				if strings.Contains(d, "=") {
					t.Errorf("dropped reports a value: %q", d)
				}
			}
		})
	}
}

func TestErrorTail(t *testing.T) {
	validateJSON := []byte(`{"valid":false,"error_count":1,"warning_count":1,"diagnostics":[
		{"severity":"warning","summary":"Deprecated","detail":"old"},
		{"severity":"error","summary":"Reference to undeclared input variable","detail":"An input variable with the name \"nope\" has not been declared.\nDeclare it.","range":{"filename":"main.tf","start":{"line":3}}}]}`)
	tests := []struct {
		name         string
		validateJSON []byte
		stderr       string
		sensitive    []string
		want         string
	}{
		{
			name:         "validate diagnostics come first",
			validateJSON: validateJSON,
			stderr:       "Error: ignored because validate said more",
			want:         `Error: Reference to undeclared input variable (main.tf:3): An input variable with the name "nope" has not been declared. Declare it.`,
		},
		{
			name:   "Error: lines of stderr otherwise",
			stderr: "some noise\nError: first\n  detail line\nError: second\n",
			want:   "Error: first\nError: second",
		},
		{
			name:   "older error messages count too",
			stderr: "Error loading state: the state is already locked by another tofu client\nLock Info:\n  ID: x\nErrors are fun: no\n",
			want:   "Error loading state: the state is already locked by another tofu client",
		},
		{
			name:   "ANSI escapes and box drawing are stripped",
			stderr: "\x1b[31m╷\x1b[0m\n\x1b[31m│\x1b[0m \x1b[1m\x1b[31mError: \x1b[0m\x1b[0m\x1b[1mBackend init failed\x1b[0m\n╵\n",
			want:   "Error: Backend init failed",
		},
		{
			name:   "repeated Error: lines are kept once",
			stderr: "Error: execution halted\n\nError: execution halted\nError: other\n",
			want:   "Error: execution halted\nError: other",
		},
		{
			name:   "the step and exit code when nothing else is known",
			stderr: "panic: something without the prefix\n",
			want:   "step apply exited 3",
		},
		{
			name:      "sensitive values are replaced",
			stderr:    "Error: cannot use password hunter22 here\n",
			sensitive: []string{"hunter22"},
			want:      "Error: cannot use password (sensitive) here",
		},
		{
			name:   "the tail is cut to 512 bytes",
			stderr: "Error: " + strings.Repeat("é", 400) + "\n",
			want:   ("Error: " + strings.Repeat("é", 400))[:511],
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := errorTail("apply", 3, tt.validateJSON, tt.stderr, tt.sensitive)
			if got != tt.want {
				t.Errorf("errorTail =\n%q\nwant\n%q", got, tt.want)
			}
			if len(got) > jobs.MaxErrorSummaryBytes {
				t.Errorf("tail has %d bytes", len(got))
			}
		})
	}
}

func TestRingBufferKeepsTheEnd(t *testing.T) {
	r := newRingBuffer(8)
	for _, s := range []string{"0123", "4567", "89ab"} {
		_, _ = r.Write([]byte(s))
	}
	if got := r.String(); got != "456789ab" {
		t.Errorf("ring = %q, want the last 8 bytes", got)
	}
}

func TestParseChanges(t *testing.T) {
	tests := []struct {
		name   string
		stdout string
		want   *jobs.Changes
	}{
		{"an apply summary", "Apply complete! Resources: 2 added, 1 changed, 3 destroyed.\n", &jobs.Changes{Add: 2, Change: 1, Destroy: 3}},
		{"an apply summary with imports", "Apply complete! Resources: 1 imported, 0 added, 0 changed, 0 destroyed.\n", &jobs.Changes{Import: 1}},
		{"a destroy summary", "noise\nDestroy complete! Resources: 4 destroyed.\n\nOutputs:\n", &jobs.Changes{Destroy: 4}},
		{"no summary", "Error: nope\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := parseChanges([]byte(tt.stdout)); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("parseChanges = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	valid := func(mut func(*Options)) Options {
		o := NewOptions()
		o.Op = jobs.OpApply
		mut(&o)
		return o
	}
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{"the defaults with an op are valid", valid(func(*Options) {}), ""},
		{"the op is required", valid(func(o *Options) { o.Op = "" }), "--op"},
		{"an unknown op is refused", valid(func(o *Options) { o.Op = "import" }), "--op"},
		{"the runtime is required", valid(func(o *Options) { o.Bin = nil }), "--bin"},
		{"an empty path is refused", valid(func(o *Options) { o.Workdir = "" }), "--workdir"},
		{"a secret environment variable must have a name", valid(func(o *Options) { o.SecretEnv = []string{""} }), "--secret-env"},
		{"a secret environment variable name holds no =", valid(func(o *Options) { o.SecretEnv = []string{"A=b"} }), "--secret-env"},
		{"the credentials directory is an absolute path", valid(func(o *Options) { o.Credentials = "creds" }), "--credentials"},
		{"the CLI configuration is an absolute path", valid(func(o *Options) { o.CLIConfig = "tofurc" }), "--cli-config"},
		{"the stop timeout must be positive", valid(func(o *Options) { o.StopTimeout = 0 }), "--stop-timeout"},
		{"the lock timeout must not be negative", valid(func(o *Options) { o.LockTimeout = -time.Second }), "--lock-timeout"},
		{"the guard needs the inputs hash", valid(func(o *Options) { o.GuardDeletes = true }), "--inputs-hash"},
		{"the guard applies to apply only", valid(func(o *Options) { o.Op, o.GuardDeletes, o.InputsHash = jobs.OpPlan, true, "h1:x" }), "--guard-deletes"},
		{"expect-plan applies to apply only", valid(func(o *Options) { o.Op, o.ExpectPlan = jobs.OpDestroy, jobs.EmptyPlanHash }), "--expect-plan"},
		{"expect-plan must be a p3 hash", valid(func(o *Options) { o.ExpectPlan = "p1:abc" }), "p3:"},
		{"expect-plan refuses a p2 hash", valid(func(o *Options) { o.ExpectPlan = "p2:" + strings.Repeat("ab", 32) }), "p3:"},
		{"restore needs chunks", valid(func(o *Options) { o.Op = jobs.OpRestore }), "--restore-chunks"},
		{"the state key directory is an absolute path", valid(func(o *Options) { o.StateKeys, o.StateKey = "keys", "one" }), "--state-keys"},
		{"state keys need the key writes use", valid(func(o *Options) { o.StateKeys = "/keys" }), "--state-key"},
		{"accepting a plaintext state needs state keys", valid(func(o *Options) { o.StateAcceptPlaintext = true }), "--state-accept-plaintext"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			var usage *UsageError
			if !errors.As(err, &usage) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Validate = %v, want a UsageError mentioning %s", err, tt.wantErr)
			}
		})
	}
}

func TestPreflight(t *testing.T) {
	dir := t.TempDir()
	write := func(path string, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	exe := write("bin/tofu", 0o755)
	notExe := write("bin/plain", 0o644)
	write("tf/main.tf", 0o644)
	write("tfjson/main.tf.json", 0o644)
	write("tofu/main.tofu", 0o644)
	write("tofujson/x.tofu.json", 0o644)
	write("nested/sub/main.tf", 0o644)
	write("other/README.md", 0o644)
	if err := os.Mkdir(filepath.Join(dir, "dirnamed"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "dirnamed", "main.tf"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, module, bin string
		wantErr           string
	}{
		{"a .tf file makes a module", "tf", exe, ""},
		{"a .tf.json file makes a module", "tfjson", exe, ""},
		{"a .tofu file makes a module", "tofu", exe, ""},
		{"a .tofu.json file makes a module", "tofujson", exe, ""},
		{"only top-level files count", "nested", exe, "holds no top-level"},
		{"other files do not make a module", "other", exe, "holds no top-level"},
		{"a directory named like a module file does not count", "dirnamed", exe, "holds no top-level"},
		{"a missing module directory fails", "missing", exe, "holds no top-level"},
		{"a runtime that is not executable fails", "tf", notExe, "not an executable"},
		{"a missing runtime fails", "tf", filepath.Join(dir, "bin/none"), "no such file"},
		{"a directory is no runtime", "tf", filepath.Join(dir, "bin"), "not an executable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := preflight(filepath.Join(dir, tt.module), tt.bin)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("preflight: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("preflight = %v, want an error with %q", err, tt.wantErr)
			}
		})
	}
}

// secretVolume lays out files the way the kubelet mounts a Secret: the data in a timestamped
// directory, ..data linking to it, and each key a link through ..data.
func secretVolume(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	stamp := filepath.Join(dir, "..2026_01_01_00_00_00.000000001")
	if err := os.Mkdir(stamp, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(stamp, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Base(stamp), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestCopyConfigFromSecretVolume(t *testing.T) {
	config := secretVolume(t, map[string]string{"main.tf.json": `{}`, "terraform.tfvars.json": `{"a":1}`})
	if err := os.MkdirAll(filepath.Join(config, "restore"), 0o755); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "root")
	if err := copyConfig(config, root); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		info, err := os.Lstat(filepath.Join(root, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if !info.Mode().IsRegular() || info.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want a regular file with 0600", e.Name(), info.Mode())
		}
	}
	if !slices.Equal(names, []string{"main.tf.json", "terraform.tfvars.json"}) {
		t.Errorf("copied %q, want exactly the two rendered files", names)
	}
	if data, _ := os.ReadFile(filepath.Join(root, "terraform.tfvars.json")); string(data) != `{"a":1}` {
		t.Errorf("tfvars copied as %q", data)
	}
}

func TestCopyConfigNeedsARootModule(t *testing.T) {
	config := secretVolume(t, map[string]string{"terraform.tfvars.json": `{}`})
	if err := copyConfig(config, filepath.Join(t.TempDir(), "root")); err == nil || !strings.Contains(err.Error(), "no root module") {
		t.Errorf("copyConfig = %v, want no root module", err)
	}
}

func TestAssembleRestore(t *testing.T) {
	state := `{"version":4,"serial":3,"lineage":"l","resources":[{"mode":"managed","instances":[{},{}]}]}`
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(state))
	_ = zw.Close()
	half := gz.Len() / 2
	tests := []struct {
		name          string
		chunks        []string
		wantResources int
		wantErr       string
	}{
		{"gzip chunks are joined and decompressed", []string{gz.String()[:half], gz.String()[half:]}, 2, ""},
		{"a plain state is taken as is", []string{state}, 2, ""},
		{"a missing chunk fails", nil, 0, "chunk 0"},
		{"a state that is not version 4 fails", []string{`{"version":3}`}, 0, "version 4"},
		{"garbage fails", []string{"not json"}, 0, "not a state"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			config := t.TempDir()
			if err := os.Mkdir(filepath.Join(config, "restore"), 0o755); err != nil {
				t.Fatal(err)
			}
			for i, c := range tt.chunks {
				if err := os.WriteFile(filepath.Join(config, "restore", string(rune('0'+i))), []byte(c), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			n := max(len(tt.chunks), 1)
			dst := filepath.Join(t.TempDir(), "restore.tfstate")
			got, err := assembleRestore(config, n, dst, nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("assembleRestore = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.wantResources {
				t.Errorf("resources = %d, want %d", got, tt.wantResources)
			}
			if data, _ := os.ReadFile(dst); string(data) != state {
				t.Errorf("assembled %q", data)
			}
		})
	}
}

func TestWriteCLIConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cli.tfrc")
	if err := writeCLIConfig(path, "/captf/providers"); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	want := "provider_installation {\n  filesystem_mirror {\n    path = \"/captf/providers\"\n  }\n}\n"
	if string(data) != want {
		t.Errorf("cli.tfrc =\n%s\nwant\n%s", data, want)
	}
}

func TestCopyInstallsExecutable(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, []byte("binary"), 0o600); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(dir, "bin", "runner")
	if err := os.Mkdir(filepath.Dir(dest), 0o755); err != nil {
		t.Fatal(err)
	}
	for range 2 { // a second copy replaces the first
		if err := Copy(src, dest); err != nil {
			t.Fatal(err)
		}
	}
	info, err := os.Stat(dest)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o755 {
		t.Errorf("mode %v, want 0755", info.Mode().Perm())
	}
	if data, _ := os.ReadFile(dest); string(data) != "binary" {
		t.Errorf("content %q", data)
	}
	if entries, _ := os.ReadDir(filepath.Dir(dest)); len(entries) != 1 {
		t.Errorf("left %d files behind, want only the runner", len(entries))
	}
	if err := Copy(src, dir); err == nil {
		t.Error("Copy onto a directory succeeded")
	}
}

func TestDisplayArg(t *testing.T) {
	tests := []struct{ name, arg, want string }{
		{"other arguments are shown", "-lock-timeout=30s", "-lock-timeout=30s"},
		{"the secret suffix is shown", "-backend-config=secret_suffix=abc-c", "-backend-config=secret_suffix=abc-c"},
		{"labels are shown", `-backend-config=labels={"a"="b"}`, `-backend-config=labels={"a"="b"}`},
		{"a backend config file is shown", "-backend-config=backend.hcl", "-backend-config=backend.hcl"},
		{"a token is hidden", "-backend-config=token=s3cret", "-backend-config=token=(hidden)"},
		{"an unknown setting is hidden", "-backend-config=client_key=pem", "-backend-config=client_key=(hidden)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := displayArg(tt.arg); got != tt.want {
				t.Errorf("displayArg(%q) = %q, want %q", tt.arg, got, tt.want)
			}
		})
	}
}

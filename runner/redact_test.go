package runner

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/captf/captf/jobs"
)

func TestRedact(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		secrets []string
		want    string
	}{
		{"a secret is replaced", "password hunter22 here", []string{"hunter22"}, "password (sensitive) here"},
		{"every occurrence is replaced", "hunter22/hunter22", []string{"hunter22"}, "(sensitive)/(sensitive)"},
		{"secrets shorter than 4 bytes are left", "a abc b", []string{"abc"}, "a abc b"},
		{"a secret that holds another is replaced whole, whatever the order", "x s3cret-long x", []string{"s3cret", "s3cret-long"}, "x (sensitive) x"},
		{"overlapping secrets are replaced as one", "xyzabcd1234", []string{"xyzabcd", "abcd1234"}, "(sensitive)"},
		{"touching secrets are replaced as one", "aaaa-bbbb-", []string{"aaaa", "-bbbb"}, "(sensitive)-"},
		{"text without a secret is unchanged", "Plan: 1 to add", []string{"hunter22"}, "Plan: 1 to add"},
		{"no secrets change nothing", "anything", nil, "anything"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := redact(tt.text, tt.secrets); got != tt.want {
				t.Errorf("redact(%q) = %q, want %q", tt.text, got, tt.want)
			}
		})
	}
}

func TestLogWriter(t *testing.T) {
	const secret = "s3cret-value"
	long := strings.Repeat("x", maxLogLine)
	tests := []struct {
		name         string
		summaryOnly  bool
		writes       []string
		want         string
		wantWithheld int
	}{
		{
			name:   "lines are written as they complete, scrubbed",
			writes: []string{"one " + secret + "\n", "two\n"},
			want:   "one (sensitive)\ntwo\n",
		},
		{
			name:   "a secret split across writes is still scrubbed",
			writes: []string{"pw s3cr", "et-value ok\n"},
			want:   "pw (sensitive) ok\n",
		},
		{
			name:   "an unfinished last line is written at the end, with a newline",
			writes: []string{"last " + secret},
			want:   "last (sensitive)\n",
		},
		{
			name:   "an overlong line is written in parts that never split a secret",
			writes: []string{long[:len(long)-5] + secret + "y", "\n"},
			want:   long[:len(long)-5] + "(sensitive)y\n",
		},
		{
			name:         "summary only: summary lines pass, the others are counted",
			summaryOnly:  true,
			writes:       []string{"  + name = \"visible\"\n", "Plan: 1 to add, 0 to change, 0 to destroy.\n", "a: Creating...\nApply complete! Resources: 1 added, 0 changed, 0 destroyed.\n"},
			want:         "Plan: 1 to add, 0 to change, 0 to destroy.\nApply complete! Resources: 1 added, 0 changed, 0 destroyed.\n",
			wantWithheld: 2,
		},
		{
			name:         "summary only: the summaries OpenTofu prints",
			summaryOnly:  true,
			writes:       []string{"No changes. Your infrastructure matches the configuration.\n", "Destroy complete! Resources: 2 destroyed.\n", "Interrupt received.\n"},
			want:         "No changes. Your infrastructure matches the configuration.\nDestroy complete! Resources: 2 destroyed.\nInterrupt received.\n",
			wantWithheld: 0,
		},
		{
			name:         "summary only: an overlong line is withheld as one line",
			summaryOnly:  true,
			writes:       []string{"  + data = \"" + long, long + "\"\n", "Plan: 1 to add\n"},
			want:         "Plan: 1 to add\n",
			wantWithheld: 1,
		},
		{
			name:         "summary only: summary lines are scrubbed too",
			summaryOnly:  true,
			writes:       []string{"Plan: " + secret + "\n"},
			want:         "Plan: (sensitive)\n",
			wantWithheld: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var secrets secretSet
			secrets.add(secret)
			var out strings.Builder
			w := newLogWriter(&out, &secrets, tt.summaryOnly)
			for _, s := range tt.writes {
				if _, err := w.Write([]byte(s)); err != nil {
					t.Fatal(err)
				}
			}
			_ = w.Close()
			if got := out.String(); got != tt.want {
				t.Errorf("log =\n%.300q\nwant\n%.300q", got, tt.want)
			}
			if got := w.Withheld(); got != tt.wantWithheld {
				t.Errorf("withheld %d lines, want %d", got, tt.wantWithheld)
			}
		})
	}
}

// writeFiles writes files under the run's directory.
func (f *fakeRun) writeFiles(t *testing.T, files map[string]string) {
	t.Helper()
	for path, content := range files {
		p := filepath.Join(f.dir, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// everythingWritten is the log (stdout and stderr) and the result file of a finished run.
func (f *fakeRun) everythingWritten(t *testing.T) map[string]string {
	t.Helper()
	doc, err := os.ReadFile(f.opts.ResultFile)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{"stdout": f.stdout.String(), "stderr": f.stderr.String(), "result": string(doc)}
}

// TestSecretsNeverReachTheLog: whichever step of whichever op fails printing a sensitive input
// on stderr (and stdout), the value is in neither the result's tail nor the runner's output.
func TestSecretsNeverReachTheLog(t *testing.T) {
	const secret = "hunter2-s3cret"
	guarded := func(o *Options) { o.GuardDeletes, o.InputsHash = true, "h1:x" }
	restore := func(o *Options) { o.RestoreChunks = 1 }
	tests := []struct {
		op       jobs.Op
		mut      func(*Options)
		planExit string
		fail     string // the runtime command that fails
		wantStep string
	}{
		{op: jobs.OpApply, fail: "init", wantStep: StepInit},
		{op: jobs.OpApply, fail: "validate", wantStep: StepValidate},
		{op: jobs.OpApply, fail: "apply", wantStep: StepApply},
		{op: jobs.OpApply, mut: guarded, fail: "plan", wantStep: StepPlan},
		{op: jobs.OpApply, mut: guarded, planExit: "2", fail: "show", wantStep: StepShow},
		{op: jobs.OpApply, mut: guarded, planExit: "2", fail: "apply", wantStep: StepApply},
		{op: jobs.OpPlan, fail: "plan", wantStep: StepPlan},
		{op: jobs.OpPlan, fail: "show", wantStep: StepShow},
		{op: jobs.OpDestroy, fail: "init", wantStep: StepInit},
		{op: jobs.OpDestroy, mut: func(o *Options) { o.ForceUnlock = "lock-id" }, fail: "force-unlock", wantStep: StepForceUnlock},
		{op: jobs.OpDestroy, fail: "destroy", wantStep: StepDestroy},
		{op: jobs.OpRefresh, fail: "apply", wantStep: StepRefresh},
		{op: jobs.OpDrift, fail: "apply", wantStep: StepRefresh},
		{op: jobs.OpDrift, fail: "plan", wantStep: StepPlan},
		{op: jobs.OpRestore, mut: restore, fail: "state-push", wantStep: StepStatePush},
		{op: jobs.OpRestore, mut: restore, fail: "state-list", wantStep: StepStateList},
	}
	for _, tt := range tests {
		name := string(tt.op) + ", " + tt.wantStep
		if tt.mut != nil && tt.op == jobs.OpApply {
			name = "guarded " + name
		}
		t.Run(name, func(t *testing.T) {
			f := newFakeRun(t, tt.op, "FAKE_FAIL="+tt.fail, "FAKE_SAY=cannot use "+secret, "FAKE_PLAN_EXIT="+tt.planExit)
			f.writeKey(t, 32)
			f.writeFiles(t, map[string]string{
				"config/main.tf.json":          `{"variable":{"name":{},"password":{"sensitive":true}}}`,
				"config/terraform.tfvars.json": `{"name":"visible","password":"` + secret + `"}`,
				"config/restore/0":             `{"version":4,"resources":[]}`,
				"show.json":                    `{"format_version":"1.2"}`,
			})
			if tt.mut != nil {
				tt.mut(&f.opts)
			}
			res, code := f.run(context.Background(), t)
			if code != ExitFailure || res.Error == nil || res.Error.Step != tt.wantStep {
				t.Fatalf("exit %d, error %+v; want a failure in %s\nlog:\n%s", code, res.Error, tt.wantStep, f.stderr)
			}
			// The runtime's error did reach the tail, scrubbed.
			if want := "Error: " + tt.fail + " broke: cannot use (sensitive)"; res.Error.Tail != want {
				t.Errorf("tail %q, want %q", res.Error.Tail, want)
			}
			for where, text := range f.everythingWritten(t) {
				if strings.Contains(text, secret) {
					t.Errorf("the %s carries the sensitive value:\n%s", where, text)
				}
			}
			if !strings.Contains(f.stderr.String(), "cannot use (sensitive)") {
				t.Errorf("the log lacks the scrubbed error:\n%s", f.stderr)
			}
		})
	}
}

// TestWhatIsSensitive: the runner learns what to scrub from the rendered root (the variables it
// declares sensitive), the identity's credentials, the environment variables from Secrets and
// the plan, and leaves everything else as the runtime printed it.
func TestWhatIsSensitive(t *testing.T) {
	const sensitiveMain = `{"variable":{"name":{},"secret":{"sensitive":true}}}`
	tests := []struct {
		name        string
		main, vars  string
		credentials map[string]string
		env         []string
		secretEnv   []string
		show        string
		say         string   // what the failing apply prints
		gone        []string // must appear nowhere
		kept        []string // must stay in the log
	}{
		{
			name: "a sensitive variable", main: sensitiveMain, vars: `{"secret":"hunter2-s3cret"}`,
			say: "pw hunter2-s3cret", gone: []string{"hunter2-s3cret"},
		},
		{
			name: "a variable that is not sensitive is left", main: sensitiveMain, vars: `{"name":"visible-name"}`,
			say: "name visible-name", kept: []string{"visible-name"},
		},
		{
			name: "every string leaf of a sensitive object", main: sensitiveMain,
			vars: `{"secret":{"user":"admin-user","keys":["key-one-1","key-two-2"]}}`,
			say:  "admin-user with key-two-2", gone: []string{"admin-user", "key-two-2"},
		},
		{
			name: "the literal text of a sensitive number", main: sensitiveMain, vars: `{"secret":987654}`,
			say: "pin 987654", gone: []string{"987654"},
		},
		{
			name: "a sensitive object as JSON, though its leaves are short", main: sensitiveMain, vars: `{"secret":{"a":"xy","n":12}}`,
			say: `value {"a":"xy","n":12}`, gone: []string{`{"a":"xy","n":12}`},
		},
		{
			name: "values shorter than 4 bytes are left", main: sensitiveMain, vars: `{"secret":"abc"}`,
			say: "pin abc.", kept: []string{"pin abc."},
		},
		{
			name: "each line of a value of several lines", main: sensitiveMain, vars: `{"secret":"#cloud-config\nrunner-secret-line\n"}`,
			say: "runner-secret-line", gone: []string{"runner-secret-line"},
		},
		{
			name: "each word of a value with spaces, as OpenTofu wraps its messages", main: sensitiveMain, vars: `{"secret":"correct horse battery"}`,
			say: "Output: correct horse", gone: []string{"correct", "horse"},
		},
		{
			name: "the words of a document of several lines stay readable elsewhere", main: sensitiveMain, vars: `{"secret":"#cloud-config\nruncmd:\n - install packages\n"}`,
			say: "Error: could not install the packages", kept: []string{"Error: could not install the packages"},
		},
		{
			name: "the escaped form a snippet of the variables file shows", main: sensitiveMain, vars: `{"secret":"line-one\nline-two"}`,
			say: `1: {"secret":"line-one\nline-two"}`, gone: []string{`line-one\nline-two`},
		},
		{
			name: "variable blocks given as a list", main: `{"variable":[{"secret":{"sensitive":true}}]}`, vars: `{"secret":"hunter2-s3cret"}`,
			say: "pw hunter2-s3cret", gone: []string{"hunter2-s3cret"},
		},
		{
			name: "a root module that does not parse makes every value sensitive", main: `{"variable":`, vars: `{"name":"visible-name"}`,
			say: "name visible-name", gone: []string{"visible-name"},
		},
		{
			name: "a variables file that does not parse makes every line of it sensitive", main: sensitiveMain, vars: `{"secret": "hunter2-s3cret"`,
			say: `1: {"secret": "hunter2-s3cret"`, gone: []string{"hunter2-s3cret"},
		},
		{
			name: "an identity's credential file", main: sensitiveMain, vars: `{}`,
			credentials: map[string]string{"CLOUD_TOKEN": "tok-123456\n"},
			say:         "token tok-123456", gone: []string{"tok-123456"},
		},
		{
			name: "an environment variable the Job names as from a Secret", main: sensitiveMain, vars: `{}`,
			env: []string{"CLOUD_KEY=key-abcdef"}, secretEnv: []string{"CLOUD_KEY"},
			say: "key key-abcdef", gone: []string{"key-abcdef"},
		},
		{
			name: "other environment variables are left", main: sensitiveMain, vars: `{}`,
			env: []string{"REGION=eu-west-1"}, secretEnv: []string{"CLOUD_KEY"},
			say: "region eu-west-1", kept: []string{"eu-west-1"},
		},
		{
			name: "a value the plan marks sensitive", main: `{}`, vars: `{}`,
			show: `{"format_version":"1.2","resource_changes":[{"address":"a","mode":"managed","change":{"actions":["create"],"before":null,"after":{"pw":"plan-s3cret"},"after_sensitive":{"pw":true}}}]}`,
			say:  "pw plan-s3cret", gone: []string{"plan-s3cret"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := append([]string{"FAKE_FAIL=apply", "FAKE_SAY=" + tt.say, "FAKE_PLAN_EXIT=2"}, tt.env...)
			f := newFakeRun(t, jobs.OpApply, env...)
			f.opts.GuardDeletes, f.opts.InputsHash = true, "h1:x"
			f.opts.SecretEnv = tt.secretEnv
			if tt.credentials != nil {
				f.opts.Credentials = filepath.Join(f.dir, "credentials")
			}
			show := tt.show
			if show == "" {
				show = `{"format_version":"1.2"}`
			}
			files := map[string]string{"config/main.tf.json": tt.main, "config/terraform.tfvars.json": tt.vars, "show.json": show}
			for name, content := range tt.credentials {
				files["credentials/"+name] = content
			}
			f.writeFiles(t, files)
			res, code := f.run(context.Background(), t)
			if code != ExitFailure || res.Error == nil || res.Error.Step != StepApply {
				t.Fatalf("exit %d, error %+v; want the apply to fail\nlog:\n%s", code, res.Error, f.stderr)
			}
			written := f.everythingWritten(t)
			for _, g := range tt.gone {
				for where, text := range written {
					if strings.Contains(text, g) {
						t.Errorf("the %s carries %q:\n%s", where, g, text)
					}
				}
			}
			for _, k := range tt.kept {
				if !strings.Contains(written["stderr"], k) || !strings.Contains(res.Error.Tail, k) {
					t.Errorf("%q was scrubbed, want it kept; tail %q", k, res.Error.Tail)
				}
			}
		})
	}
}

// TestPlanBodiesStayOutOfTheLog: the steps that print planned changes log only their summary
// lines and say how many lines they withheld; the change counts still come from their output.
func TestPlanBodiesStayOutOfTheLog(t *testing.T) {
	const marker = "visible-planned-value"
	tests := []struct {
		name        string
		op          jobs.Op
		mut         func(*Options)
		planExit    string
		wantSummary []string
		withheld    []string // steps that say they withheld lines
		wantChanges *jobs.Changes
	}{
		{
			name: "plan", op: jobs.OpPlan,
			wantSummary: []string{"Plan: 1 to add, 0 to change, 0 to destroy."}, withheld: []string{"plan"},
		},
		{
			name: "apply", op: jobs.OpApply,
			wantSummary: []string{"Apply complete! Resources: 1 added, 0 changed, 0 destroyed."}, withheld: []string{"apply"},
			wantChanges: &jobs.Changes{Add: 1},
		},
		{
			name: "guarded apply", op: jobs.OpApply, mut: func(o *Options) { o.GuardDeletes, o.InputsHash = true, "h1:x" }, planExit: "2",
			wantSummary: []string{"Plan: 1 to add, 0 to change, 0 to destroy.", "Apply complete! Resources: 1 added, 0 changed, 0 destroyed."},
			withheld:    []string{"plan", "apply"}, wantChanges: &jobs.Changes{Add: 1},
		},
		{
			name: "destroy", op: jobs.OpDestroy,
			wantSummary: []string{"Destroy complete! Resources: 1 destroyed."}, withheld: []string{"destroy"},
			wantChanges: &jobs.Changes{Destroy: 1},
		},
		{
			name: "refresh", op: jobs.OpRefresh,
			wantSummary: []string{"Apply complete! Resources: 1 added, 0 changed, 0 destroyed."}, withheld: []string{"refresh"},
			wantChanges: &jobs.Changes{Add: 1},
		},
		{
			name: "drift", op: jobs.OpDrift, planExit: "2",
			wantSummary: []string{"Plan: 1 to add, 0 to change, 0 to destroy."}, withheld: []string{"refresh", "plan"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeRun(t, tt.op, "FAKE_BODY="+marker, "FAKE_PLAN_EXIT="+tt.planExit)
			f.writeKey(t, 32)
			f.writeFiles(t, map[string]string{"show.json": `{"format_version":"1.2","resource_changes":[{"address":"a","mode":"managed","change":{"actions":["create"],"before":null,"after":{"name":"x"}}}]}`})
			if tt.mut != nil {
				tt.mut(&f.opts)
			}
			res, code := f.run(context.Background(), t)
			if code != ExitOK || res.Error != nil {
				t.Fatalf("exit %d, error %+v\nlog:\n%s", code, res.Error, f.stderr)
			}
			for where, text := range f.everythingWritten(t) {
				if strings.Contains(text, marker) {
					t.Errorf("the %s carries the plan body:\n%s", where, text)
				}
			}
			for _, s := range tt.wantSummary {
				if !strings.Contains(f.stdout.String(), s+"\n") {
					t.Errorf("the log lacks the summary %q:\n%s", s, f.stdout)
				}
			}
			for _, step := range tt.withheld {
				if want := "runner: step " + step + ": withheld 2 line(s) of output from the log"; !strings.Contains(f.stderr.String(), want) {
					t.Errorf("the log does not say %q:\n%s", want, f.stderr)
				}
			}
			if (res.Changes == nil) != (tt.wantChanges == nil) || res.Changes != nil && *res.Changes != *tt.wantChanges {
				t.Errorf("changes %+v, want %+v", res.Changes, tt.wantChanges)
			}
		})
	}
}

// TestUnreadableCredentialsFailTheRun: a run told where its credentials are but unable to read
// them would not know what to redact, so it fails in prepare before any step.
func TestUnreadableCredentialsFailTheRun(t *testing.T) {
	f := newFakeRun(t, jobs.OpApply)
	f.opts.Credentials = filepath.Join(f.dir, "missing-credentials")
	res, code := f.run(context.Background(), t)
	if code != ExitFailure || res.Error == nil || res.Error.Step != StepPrepare || !strings.Contains(res.Error.Tail, "credentials") {
		t.Fatalf("exit %d, error %+v; want a prepare failure about the credentials", code, res.Error)
	}
	if len(res.Steps) != 0 {
		t.Errorf("steps ran: %v", stepNames(res))
	}
}

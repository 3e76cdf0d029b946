package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/captf/captf/jobs"
	"github.com/captf/captf/runner"
)

const thisAddress = "module.workspace.terraform_data.this"

func TestApplyCreatesStateAndRepeatsAsNoOp(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "basic")

	first := h.run(jobs.OpApply, vars("name", "a"), nil).mustSucceed(t)
	if got := first.steps(); !slices.Equal(got, []string{"init", "validate", "apply"}) {
		t.Errorf("steps %v", got)
	}
	if first.Changes == nil || *first.Changes != (jobs.Changes{Add: 1}) {
		t.Errorf("changes %+v, want 1 added", first.Changes)
	}
	if first.Runtime == nil || first.Runtime.Version == "" || first.Image == nil || first.Image.Ref == "" {
		t.Errorf("runtime %+v, image %+v; want both reported", first.Runtime, first.Image)
	}
	// The state lives beside the object, labelled from the backend configuration with the
	// owner labels the controller's metadata cache selects and maps by.
	secret := h.stateSecret()
	for key, value := range jobs.OwnerLabels(jobs.KindCluster, "web") {
		if secret.Labels[key] != value {
			t.Errorf("state Secret label %s = %q, want %q", key, secret.Labels[key], value)
		}
	}
	if v, ok := secret.Labels["clusterctl.cluster.x-k8s.io/move"]; !ok || v != "" || secret.Labels["cluster.x-k8s.io/cluster-name"] != "prod" || secret.Labels["tfstate"] != "true" {
		t.Errorf("state Secret labels %v, want the backend-config labels", secret.Labels)
	}
	state, _ := h.state()
	if state.instances() != 1 || state.inputName(t) != "a" {
		t.Errorf("state %+v, want terraform_data.this with name a", state)
	}
	if holder := h.lockHolder(); holder != "" {
		t.Errorf("the lock is still held by %s", holder)
	}
	// The machine's TF_CLI_CONFIG_FILE never reached OpenTofu; only its name is logged.
	if os.Getenv("TF_CLI_CONFIG_FILE") != "" && !strings.Contains(first.log, "dropped TF_CLI_CONFIG_FILE") {
		t.Errorf("the log does not report dropping TF_CLI_CONFIG_FILE")
	}

	second := h.run(jobs.OpApply, vars("name", "a"), nil).mustSucceed(t)
	if second.Changes == nil || *second.Changes != (jobs.Changes{}) {
		t.Errorf("second apply changes %+v, want none", second.Changes)
	}
	if after, _ := h.state(); after.Serial != state.Serial {
		t.Errorf("the second apply wrote state serial %d after %d", after.Serial, state.Serial)
	}
}

func TestPlanHash(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "basic")
	otherKey := h.writeKey(strings.Repeat("k", 32))
	withKey := func(key string) func(*runner.Options) {
		return func(o *runner.Options) { o.PlanKeyFile = key }
	}

	first := h.run(jobs.OpPlan, vars("name", "a"), nil).mustSucceed(t)
	if got := first.steps(); !slices.Equal(got, []string{"init", "validate", "plan", "show"}) {
		t.Errorf("steps %v", got)
	}
	p := first.Plan
	if p == nil || !strings.HasPrefix(p.Hash, "p3:") || p.Hash == jobs.EmptyPlanHash || p.Counts != (jobs.Counts{Add: 1}) {
		t.Fatalf("plan %+v, want a p3: hash of one create", p)
	}
	if !slices.EqualFunc(p.Resources, []jobs.ResourceChange{{Address: thisAddress, Actions: []string{"create"}}}, func(a, b jobs.ResourceChange) bool {
		return a.Address == b.Address && slices.Equal(a.Actions, b.Actions)
	}) {
		t.Errorf("resources %+v", p.Resources)
	}

	t.Run("stable", func(t *testing.T) {
		if again := h.run(jobs.OpPlan, vars("name", "a"), nil).mustSucceed(t); again.Plan.Hash != p.Hash {
			t.Errorf("the same plan hashed %s, then %s", p.Hash, again.Plan.Hash)
		}
	})
	t.Run("changes with the key", func(t *testing.T) {
		if other := h.run(jobs.OpPlan, vars("name", "a"), withKey(otherKey)).mustSucceed(t); other.Plan.Hash == p.Hash {
			t.Error("another key gave the same hash")
		}
	})
	t.Run("changes with a value", func(t *testing.T) {
		if other := h.run(jobs.OpPlan, vars("name", "b"), nil).mustSucceed(t); other.Plan.Hash == p.Hash {
			t.Error("another value gave the same hash")
		}
	})
	t.Run("ignores an attribute the change does not touch", func(t *testing.T) {
		// Two objects whose states differ only in extra; the same change of name must hash
		// the same, because extra is not part of what would be applied.
		s := h.sibling()
		h.run(jobs.OpApply, vars("name", "a", "extra", "x"), nil).mustSucceed(t)
		s.run(jobs.OpApply, vars("name", "a", "extra", "y"), nil).mustSucceed(t)
		px := h.run(jobs.OpPlan, vars("name", "b", "extra", "x"), nil).mustSucceed(t).Plan
		py := s.run(jobs.OpPlan, vars("name", "b", "extra", "y"), nil).mustSucceed(t).Plan
		if px.Counts != (jobs.Counts{Change: 1}) {
			t.Errorf("plan counts %+v, want one update", px.Counts)
		}
		if px.Hash != py.Hash {
			t.Errorf("hashes differ: %s and %s", px.Hash, py.Hash)
		}
		if pz := s.run(jobs.OpPlan, vars("name", "c", "extra", "y"), nil).mustSucceed(t).Plan; pz.Hash == py.Hash {
			t.Error("a different change hashed the same")
		}
	})
	t.Run("is the empty-plan hash without changes", func(t *testing.T) {
		if empty := h.run(jobs.OpPlan, vars("name", "a", "extra", "x"), nil).mustSucceed(t); empty.Plan.Hash != jobs.EmptyPlanHash || empty.Plan.Counts != (jobs.Counts{}) {
			t.Errorf("plan %+v, want the empty-plan hash", empty.Plan)
		}
	})
}

func TestGuardBlocksReplace(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "basic")
	h.run(jobs.OpApply, vars("name", "a", "generation", 1), nil).mustSucceed(t)
	before, _ := h.state()
	id := before.attribute(t, "this", "id")

	const inputs = "h1:generation-2"
	guarded := func(allow string) func(*runner.Options) {
		return func(o *runner.Options) {
			o.GuardDeletes, o.InputsHash, o.AllowDeletesHash = true, inputs, allow
			o.PlanKeyFile = "" // an Automatic guard run has no key mounted
		}
	}
	for _, allow := range []string{"", "h1:some-other-inputs"} {
		blocked := h.run(jobs.OpApply, vars("name", "a", "generation", 2), guarded(allow)).mustFail(t, jobs.ErrorKindBlocked)
		if got := blocked.steps(); !slices.Equal(got, []string{"init", "validate", "plan", "show"}) {
			t.Errorf("steps %v, want no apply", got)
		}
		if blocked.Plan == nil || !blocked.Plan.Destructive || blocked.Plan.Counts != (jobs.Counts{Add: 1, Destroy: 1}) {
			t.Errorf("plan %+v, want a destructive replace", blocked.Plan)
		}
		if len(blocked.Plan.Resources) == 0 || blocked.Plan.Resources[0].Address != thisAddress || !slices.Equal(blocked.Plan.Resources[0].Actions, []string{"delete", "create"}) {
			t.Errorf("resources %+v, want %s replaced", blocked.Plan.Resources, thisAddress)
		}
		if !strings.Contains(blocked.Error.Tail, thisAddress+" (replace)") {
			t.Errorf("tail %q does not list %s (replace)", blocked.Error.Tail, thisAddress)
		}
		if blocked.Changes != nil {
			t.Errorf("changes %+v after a blocked apply", blocked.Changes)
		}
		if after, _ := h.state(); after.attribute(t, "this", "id") != id || after.Serial != before.Serial {
			t.Errorf("the blocked apply changed the state")
		}
	}

	// A non-destructive change passes the guard without approval.
	h.run(jobs.OpApply, vars("name", "b", "generation", 1), guarded("")).mustSucceed(t)

	approved := h.run(jobs.OpApply, vars("name", "b", "generation", 2), guarded(inputs)).mustSucceed(t)
	if approved.Changes == nil || *approved.Changes != (jobs.Changes{Add: 1, Destroy: 1}) {
		t.Errorf("changes %+v, want the replace applied", approved.Changes)
	}
	if after, _ := h.state(); after.attribute(t, "this", "id") == id {
		t.Error("the approved replace kept the old resource")
	}
}

func TestExpectPlan(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "basic")
	expect := func(hash string) func(*runner.Options) {
		return func(o *runner.Options) { o.ExpectPlan = hash }
	}

	planned := h.run(jobs.OpPlan, vars("name", "a"), nil).mustSucceed(t).Plan
	applied := h.run(jobs.OpApply, vars("name", "a"), expect(planned.Hash)).mustSucceed(t)
	if applied.Plan == nil || applied.Plan.Hash != planned.Hash || applied.Changes == nil || applied.Changes.Add != 1 {
		t.Fatalf("plan %+v, changes %+v; want the approved plan applied", applied.Plan, applied.Changes)
	}
	before, _ := h.state()

	stale := h.run(jobs.OpPlan, vars("name", "b"), nil).mustSucceed(t).Plan
	changed := h.run(jobs.OpApply, vars("name", "c"), expect(stale.Hash)).mustFail(t, jobs.ErrorKindPlanChanged)
	if got := changed.steps(); slices.Contains(got, "apply") {
		t.Errorf("steps %v include apply", got)
	}
	if changed.Plan == nil || changed.Plan.Hash == stale.Hash || !strings.HasPrefix(changed.Plan.Hash, "p3:") || changed.Plan.Counts != (jobs.Counts{Change: 1}) {
		t.Errorf("plan %+v, want the new plan's hash and counts", changed.Plan)
	}
	if len(changed.Plan.Resources) != 1 || changed.Plan.Resources[0].Address != thisAddress {
		t.Errorf("resources %+v, want %s", changed.Plan.Resources, thisAddress)
	}
	if after, _ := h.state(); after.Serial != before.Serial || after.inputName(t) != "a" {
		t.Error("a plan-changed apply changed the state")
	}

	// An approved empty plan applies nothing and succeeds.
	if empty := h.run(jobs.OpApply, vars("name", "a"), expect(jobs.EmptyPlanHash)).mustSucceed(t); empty.Plan.Hash != jobs.EmptyPlanHash {
		t.Errorf("plan %+v, want the empty-plan hash", empty.Plan)
	}
}

func TestDriftIsDetected(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "basic")
	h.run(jobs.OpApply, vars("name", "a"), nil).mustSucceed(t)

	clean := h.run(jobs.OpDrift, vars("name", "a"), nil).mustSucceed(t)
	if got := clean.steps(); !slices.Equal(got, []string{"init", "refresh", "plan"}) {
		t.Errorf("steps %v", got)
	}
	if clean.Drift == nil || clean.Drift.Detected {
		t.Errorf("drift %+v on an untouched state", clean.Drift)
	}

	// Change the stored attribute behind OpenTofu's back, in the backend's own format.
	_, raw := h.state()
	for _, r := range raw["resources"].([]any) {
		res := r.(map[string]any)
		if res["name"] == "this" {
			attrs := res["instances"].([]any)[0].(map[string]any)["attributes"].(map[string]any)
			// terraform_data keeps its dynamically typed input as {"value": …, "type": …}.
			attrs["input"].(map[string]any)["value"].(map[string]any)["name"] = "edited"
		}
	}
	h.writeState(raw)

	drifted := h.run(jobs.OpDrift, vars("name", "a"), nil).mustSucceed(t)
	d := drifted.Drift
	if d == nil || !d.Detected || d.Counts != (jobs.Counts{Change: 1}) {
		t.Fatalf("drift %+v, want one update", d)
	}
	if len(d.Resources) != 1 || d.Resources[0].Address != thisAddress || !slices.Equal(d.Resources[0].Actions, []string{"update"}) {
		t.Errorf("drift resources %+v", d.Resources)
	}
	if drifted.Plan != nil {
		t.Errorf("a drift check reported a plan: %+v", drifted.Plan)
	}
}

func TestDestroyEmptiesState(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "basic")
	h.run(jobs.OpApply, vars("name", "a", "items", 3), nil).mustSucceed(t)
	if s, _ := h.state(); s.instances() != 4 {
		t.Fatalf("state holds %d instances, want 4", s.instances())
	}
	destroyed := h.run(jobs.OpDestroy, vars("name", "a", "items", 3), nil).mustSucceed(t)
	if got := destroyed.steps(); !slices.Equal(got, []string{"init", "destroy"}) {
		t.Errorf("steps %v", got)
	}
	if destroyed.Changes == nil || *destroyed.Changes != (jobs.Changes{Destroy: 4}) {
		t.Errorf("changes %+v, want 4 destroyed", destroyed.Changes)
	}
	if s, _ := h.state(); s.instances() != 0 {
		t.Errorf("state holds %d instances after destroy", s.instances())
	}
}

func TestRefresh(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "basic")
	h.run(jobs.OpApply, vars("name", "a"), nil).mustSucceed(t)
	refreshed := h.run(jobs.OpRefresh, vars("name", "a"), nil).mustSucceed(t)
	if got := refreshed.steps(); !slices.Equal(got, []string{"init", "refresh"}) {
		t.Errorf("steps %v", got)
	}
	if refreshed.Changes == nil || *refreshed.Changes != (jobs.Changes{}) {
		t.Errorf("changes %+v, a refresh changes no resource", refreshed.Changes)
	}
}

func TestSIGTERMMidApplyIsInterrupted(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "slow")
	o := h.options(jobs.OpApply, h.render(vars("name", "a")))
	log := &syncBuffer{}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan runResult, 1)
	go func() {
		o.Stdout, o.Stderr = log, log
		res, code := runner.Run(ctx, o)
		done <- runResult{RunnerResult: res, code: code, log: log.String()}
	}()
	eventually(t, 2*time.Minute, "the provisioner starting", func() bool {
		_, err := os.Stat(filepath.Join(o.Workdir, "provisioner-started"))
		return err == nil
	})
	stopped := time.Now()
	stop() // what SIGTERM does to `runner run`

	var res runResult
	select {
	case res = <-done:
	case <-time.After(time.Minute):
		t.Fatalf("the run did not end after the stop; log:\n%s", log)
	}
	res.mustFail(t, jobs.ErrorKindInterrupted)
	if res.Error.Step != "apply" {
		t.Errorf("interrupted in %q, want apply", res.Error.Step)
	}
	if took := time.Since(stopped); took > 25*time.Second {
		t.Errorf("OpenTofu took %s to stop; it should stop gracefully on SIGTERM", took)
	}
	if !strings.Contains(res.log, "Interrupt received") {
		t.Errorf("OpenTofu did not report the interrupt; log:\n%s", res.log)
	}
	// A graceful stop releases the state lock.
	if holder := h.lockHolder(); holder != "" {
		t.Errorf("the lock is still held by %s", holder)
	}
	doc, err := os.ReadFile(o.ResultFile)
	if err != nil {
		t.Fatal(err)
	}
	if parsed, err := jobs.ParseRunnerResult(doc); err != nil || parsed.Error == nil || parsed.Error.Kind != jobs.ErrorKindInterrupted {
		t.Errorf("result file %s (%v), want interrupted", doc, err)
	}
}

func TestResultFitsWith200Resources(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "basic")
	for _, op := range []jobs.Op{jobs.OpPlan, jobs.OpApply} {
		res := h.run(op, vars("name", "a", "items", 200), func(o *runner.Options) {
			if op == jobs.OpApply {
				o.GuardDeletes, o.InputsHash = true, "h1:x"
			}
		}).mustSucceed(t)
		if len(res.doc) > jobs.MaxRunnerResultBytes {
			t.Errorf("%s: result of %d bytes", op, len(res.doc))
		}
		parsed, err := jobs.ParseRunnerResult(res.doc)
		if err != nil {
			t.Fatal(err)
		}
		p := parsed.Plan
		if p == nil || p.Counts != (jobs.Counts{Add: 201}) || !strings.HasPrefix(p.Hash, "p3:") || !p.Truncated || len(p.Resources) == 0 || len(p.Resources) > jobs.MaxPlanResources {
			t.Errorf("%s: plan %+v, want the hash, 201 adds and a truncated list", op, p)
		}
	}
	if s, _ := h.state(); s.instances() != 201 {
		t.Errorf("state holds %d instances, want 201", s.instances())
	}
}

func TestBrokenModuleHasCuratedTail(t *testing.T) {
	t.Parallel()
	t.Run("validate fails", func(t *testing.T) {
		h := newHarness(t, "broken")
		res := h.run(jobs.OpApply, vars("name", "a"), nil).mustFail(t, jobs.ErrorKindStep)
		if res.Error.Step != "validate" {
			t.Errorf("failed step %q, want validate", res.Error.Step)
		}
		tail := res.Error.Tail
		if !strings.HasPrefix(tail, "Error: Reference to undeclared input variable") || !strings.Contains(tail, "main.tf:") || len(tail) > jobs.MaxErrorSummaryBytes {
			t.Errorf("tail %q, want the validate diagnostic with its place", tail)
		}
	})
	t.Run("apply fails", func(t *testing.T) {
		h := newHarness(t, "failing")
		res := h.run(jobs.OpApply, vars("name", "a"), nil).mustFail(t, jobs.ErrorKindStep)
		if res.Error.Step != "apply" {
			t.Errorf("failed step %q, want apply", res.Error.Step)
		}
		tail := res.Error.Tail
		if !strings.HasPrefix(tail, "Error: local-exec provisioner error") || strings.ContainsAny(tail, "\x1b│╷╵") {
			t.Errorf("tail %q, want the Error: lines of stderr, plain", tail)
		}
		if last := res.Steps[len(res.Steps)-1]; last.Name != "apply" || last.Exit != 1 {
			t.Errorf("last step %+v, want apply exiting 1", last)
		}
	})
}

// TestSensitiveInputsNeverReachTheLog: real OpenTofu prints a sensitive input in the error of a
// failing apply and of a failing destroy; neither the log nor the result carries it. The plan
// body of the apply, which shows a variable that is not sensitive, stays out of the log too.
func TestSensitiveInputsNeverReachTheLog(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "echoing")
	secret, name := "s3cret-"+randomHex(t, 8), "visible-"+randomHex(t, 8)
	run := func(op jobs.Op, failApply bool) runResult {
		t.Helper()
		o := h.options(op, h.renderSensitive(vars("name", name, "secret", secret, "fail_apply", failApply), "secret"))
		return h.runOptions(context.Background(), o)
	}
	check := func(what string, res runResult, wantTail string) {
		t.Helper()
		for where, text := range map[string]string{"log": res.log, "result": string(res.doc)} {
			if strings.Contains(text, secret) {
				t.Errorf("%s: the %s carries the sensitive input:\n%s", what, where, text)
			}
			if strings.Contains(text, name) {
				t.Errorf("%s: the %s carries the plan body:\n%s", what, where, text)
			}
		}
		if res.Error != nil && !strings.Contains(res.Error.Tail, wantTail) {
			t.Errorf("%s: tail %q, want it to hold %q", what, res.Error.Tail, wantTail)
		}
	}

	failed := run(jobs.OpApply, true).mustFail(t, jobs.ErrorKindStep)
	check("failing apply", failed, "Error: applying with (sensitive)")
	applied := run(jobs.OpApply, false).mustSucceed(t)
	check("apply", applied, "")
	if !strings.Contains(applied.log, "\nApply complete! Resources:") || !strings.Contains(applied.log, "runner: step apply: withheld ") {
		t.Errorf("the apply's log lacks its summary or the withheld notice:\n%s", applied.log)
	}
	destroyed := run(jobs.OpDestroy, false).mustFail(t, jobs.ErrorKindStep)
	check("failing destroy", destroyed, "Error: destroying with (sensitive)")
}

func TestForceUnlockReleasesAStaleLock(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "basic")
	const staleID = "6c1e9d3a-0000-4000-8000-000000000001"
	info, _ := json.Marshal(map[string]string{
		"ID": staleID, "Operation": "OperationTypeApply", "Who": "root@captf-c-x-apply-a1-abcdef-xxxxx",
		"Version": "1.10.10", "Created": "2026-01-01T00:00:00Z",
	})
	// The state exists before the lock: the Job that left the lock had got past init.
	h.run(jobs.OpApply, vars("name", "a"), nil).mustSucceed(t)
	leases := h.client.CoordinationV1().Leases(h.ns)
	lease, err := leases.Get(context.Background(), h.lockLeaseName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	holder := staleID
	lease.Spec.HolderIdentity = &holder
	lease.Annotations = map[string]string{"app.terraform.io/lock-info": string(info)}
	if _, err := leases.Update(context.Background(), lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if h.lockHolder() != staleID {
		t.Fatal("the stale lock is not in place")
	}

	locked := h.run(jobs.OpApply, vars("name", "a"), func(o *runner.Options) { o.LockTimeout = 0 }).mustFail(t, jobs.ErrorKindStep)
	if locked.Error.Step != "apply" || !strings.Contains(locked.Error.Tail, "Error: Error acquiring the state lock") {
		t.Errorf("error %+v, want the lock error of apply", locked.Error)
	}

	unlock := func(o *runner.Options) { o.ForceUnlock = staleID }
	unlocked := h.run(jobs.OpApply, vars("name", "a"), unlock).mustSucceed(t)
	if got := unlocked.steps(); !slices.Equal(got, []string{"init", "force-unlock", "validate", "apply"}) {
		t.Errorf("steps %v", got)
	}
	// Handing the same stale ID to a later Job is harmless: the lock is already gone.
	h.run(jobs.OpApply, vars("name", "a"), unlock).mustSucceed(t)
}

func TestRestorePushesABackup(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "basic")
	inputs := vars("name", "a", "items", 2)
	h.run(jobs.OpApply, inputs, nil).mustSucceed(t)
	backup := h.stateSecret().Data["tfstate"] // verbatim, as a backup keeps it
	h.run(jobs.OpDestroy, inputs, nil).mustSucceed(t)
	emptyBackup := h.stateSecret().Data["tfstate"]

	restore := func(chunks [][]byte, resources int) runResult {
		config := h.renderBackendOnly()
		if err := os.Mkdir(filepath.Join(config, "restore"), 0o755); err != nil {
			t.Fatal(err)
		}
		for i, c := range chunks {
			if err := os.WriteFile(filepath.Join(config, "restore", string(rune('0'+i))), c, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		o := h.options(jobs.OpRestore, config)
		o.RestoreChunks, o.RestoreResources = len(chunks), resources
		return h.runOptions(context.Background(), o)
	}

	half := len(backup) / 2
	restored := restore([][]byte{backup[:half], backup[half:]}, 3).mustSucceed(t)
	if got := restored.steps(); !slices.Equal(got, []string{"init", "state-push", "state-list"}) {
		t.Errorf("steps %v", got)
	}
	if s, _ := h.state(); s.instances() != 3 {
		t.Errorf("restored state holds %d instances, want 3", s.instances())
	}
	if p := h.run(jobs.OpPlan, inputs, nil).mustSucceed(t).Plan; p.Hash != jobs.EmptyPlanHash {
		t.Errorf("after the restore the inputs plan %+v, want no changes", p)
	}

	failed := restore([][]byte{emptyBackup}, 3).mustFail(t, jobs.ErrorKindStep)
	if failed.Error.Step != "state-list" {
		t.Errorf("error %+v, want the empty state list to fail", failed.Error)
	}
}

// TestOpenTofuReadsOnlyTheRunsCLIConfiguration runs real OpenTofu with a CLI configuration that
// holds an unknown provider installation method, which OpenTofu reports on every command when
// it reads it. Only the file given with --cli-config is read; no variable of the environment
// leads OpenTofu to another one.
func TestOpenTofuReadsOnlyTheRunsCLIConfiguration(t *testing.T) {
	t.Parallel()
	const (
		bogus    = "provider_installation {\n  bogus_method {}\n}\n"
		reported = `Unknown provider installation method "bogus_method"`
	)
	write := func(t *testing.T, path string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(bogus), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	tests := []struct {
		name   string
		set    func(t *testing.T, o *runner.Options)
		isRead bool
	}{
		{"a tofurc under XDG_CONFIG_HOME is not read", func(t *testing.T, o *runner.Options) {
			dir := t.TempDir()
			write(t, filepath.Join(dir, "opentofu", "tofurc"))
			o.Environ = append(o.Environ, "XDG_CONFIG_HOME="+dir)
		}, false},
		{"a *.tfrc in the configuration directory under XDG_CONFIG_HOME is not read", func(t *testing.T, o *runner.Options) {
			dir := t.TempDir()
			write(t, filepath.Join(dir, "opentofu", "extra.tfrc"))
			o.Environ = append(o.Environ, "XDG_CONFIG_HOME="+dir)
		}, false},
		{"a .tofurc under another HOME is not read", func(t *testing.T, o *runner.Options) {
			dir := t.TempDir()
			write(t, filepath.Join(dir, ".tofurc"))
			o.Environ = append(o.Environ, "HOME="+dir)
		}, false},
		{"TERRAFORM_CONFIG is not read", func(t *testing.T, o *runner.Options) {
			o.Environ = append(o.Environ, "TERRAFORM_CONFIG="+write(t, filepath.Join(t.TempDir(), "tofurc")))
		}, false},
		{"TF_CLI_CONFIG_FILE is not read", func(t *testing.T, o *runner.Options) {
			o.Environ = append(o.Environ, "TF_CLI_CONFIG_FILE="+write(t, filepath.Join(t.TempDir(), "tofurc")))
		}, false},
		{"the run's own CLI configuration is read", func(t *testing.T, o *runner.Options) {
			o.CLIConfig = write(t, filepath.Join(t.TempDir(), "tofurc"))
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, "basic")
			res := h.run(jobs.OpApply, vars("name", "a"), func(o *runner.Options) { tt.set(t, o) }).mustSucceed(t)
			if got := strings.Contains(res.log, reported); got != tt.isRead {
				t.Errorf("OpenTofu read the CLI configuration: %v, want %v\nlog:\n%s", got, tt.isRead, res.log)
			}
		})
	}
}

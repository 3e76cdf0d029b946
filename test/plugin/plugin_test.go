// Package plugin builds the kubectl-captf binary and drives it against the whole system: the
// real control plane, controller, aggregated API server, node agent, runner and OpenTofu (see
// test/system). Every assertion reads the plugin's own output and exit code.
package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	runsv1alpha1 "github.com/captf/captf/apis/runs/v1alpha1"
	"github.com/captf/captf/test/capitest"
	"github.com/captf/captf/test/system"
)

var (
	sys *system.System
	// pluginDir holds the built kubectl-captf and the completion entry kubectl_complete-captf,
	// put first on the PATH of every kubectl the tests run.
	pluginDir string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "kubectl-captf-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "plugin: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	pluginDir = dir
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "kubectl-captf"), "github.com/captf/captf/cmd/kubectl-captf")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "plugin: building kubectl-captf: %v\n%s", err, out)
		return 1
	}
	entry, err := os.ReadFile(filepath.Join("..", "..", "cmd", "kubectl-captf", "kubectl_complete-captf"))
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "kubectl_complete-captf"), entry, 0o755)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "plugin: installing kubectl_complete-captf: %v\n", err)
		return 1
	}
	return system.Main(m, system.Options{})
}

// suite is one test's namespace and an admin client.
type suite struct {
	*system.Suite
}

func newSuite(t *testing.T) *suite {
	t.Helper()
	s := &suite{system.NewSuite(t, "plugin")}
	sys = s.Sys
	return s
}

// result is one run of kubectl.
type result struct {
	stdout, stderr string
	err            error
}

func (r result) String() string {
	return fmt.Sprintf("err: %v\nstdout:\n%s\nstderr:\n%s", r.err, r.stdout, r.stderr)
}

// kubectl runs bin/kubectl with the plugin on PATH, as a person who installed it does.
func (s *suite) kubectl(ctx context.Context, stdin string, args ...string) result {
	s.T.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join(sys.Env.BinDir, "kubectl"), args...)
	path := strings.Join([]string{pluginDir, sys.Env.BinDir, os.Getenv("PATH")}, string(os.PathListSeparator))
	cmd.Env = append(os.Environ(), "PATH="+path)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &stdout, &stderr
	err := cmd.Run()
	return result{stdout: stdout.String(), stderr: stderr.String(), err: err}
}

// captf runs `kubectl captf ARGS` in the suite's namespace, as admin or with another
// kubeconfig, with stdin.
func (s *suite) captf(kubeconfig, stdin string, args ...string) result {
	s.T.Helper()
	if kubeconfig == "" {
		kubeconfig = sys.Env.Kubeconfig
	}
	ctx, cancel := context.WithTimeout(s.Ctx, time.Minute)
	defer cancel()
	return s.kubectl(ctx, stdin, append([]string{"captf", "--kubeconfig=" + kubeconfig, "-n", s.NS}, args...)...)
}

// get runs `kubectl get ARGS` in the suite's namespace as admin.
func (s *suite) get(args ...string) result {
	s.T.Helper()
	ctx, cancel := context.WithTimeout(s.Ctx, time.Minute)
	defer cancel()
	return s.kubectl(ctx, "", append([]string{"get", "--kubeconfig=" + sys.Env.Kubeconfig, "-n", s.NS}, args...)...)
}

func (s *suite) eventually(what string, timeout time.Duration, cond func() (bool, error)) {
	s.T.Helper()
	s.Eventually(what, timeout, func(context.Context) (bool, error) { return cond() })
}

// runs lists target's runs, oldest first, with `kubectl captf runs TARGET -o json`.
func (s *suite) runs(target string) []runsv1alpha1.Run {
	s.T.Helper()
	r := s.captf("", "", "runs", target, "-o", "json")
	if r.err != nil {
		s.T.Fatalf("kubectl captf runs: %s", r)
	}
	var list runsv1alpha1.RunList
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		s.T.Fatalf("decoding runs: %v\n%s", err, r.stdout)
	}
	return list.Items
}

// waitRun waits until target's run of op and attempt reaches one of phases.
func (s *suite) waitRun(target, op string, attempt int32, phases ...runsv1alpha1.RunPhase) runsv1alpha1.Run {
	s.T.Helper()
	var found runsv1alpha1.Run
	s.eventually(fmt.Sprintf("%s run %d of %s reaches %v", op, attempt, target, phases), 3*time.Minute, func() (bool, error) {
		for _, r := range s.runs(target) {
			if r.Spec.Operation == op && r.Spec.Attempt == attempt {
				for _, p := range phases {
					if r.Status.Phase == p {
						found = r
						return true, nil
					}
				}
			}
		}
		return false, nil
	})
	return found
}

// waitWhy polls `kubectl captf why` until its output matches.
func (s *suite) waitWhy(target string, want *regexp.Regexp) string {
	s.T.Helper()
	return s.waitWhyKind(target, "cluster", want)
}

// TestManualPlanIsShownDeclinedRefusedAndApproved walks a Manual cluster's plan through the
// plugin: `runs` oldest first, `plan`, `approve` answered
// "n", an approval written by hand (refused by the install's policy), a wrong hash, a superseded
// plan and an applied plan (each a 409 with the server's message), a missing plan, and
// `approve --yes` by an approver, after which the apply runs.
func TestManualPlanIsShownDeclinedRefusedAndApproved(t *testing.T) {
	s := newSuite(t)
	tc := s.Cluster("manual", `{"name":"manual"}`, func(c *infrav1.TerraformCluster) { c.Spec.ApplyPolicy = infrav1.ApplyPolicyManual })
	s.waitRun("manual", "apply", 1, runsv1alpha1.RunPhaseSucceeded)
	s.PatchVariables(tc, `{"name":"manual","size":"large"}`)
	planRun := s.waitRun("manual", "plan", 1, runsv1alpha1.RunPhaseSucceeded)

	// runs: the plan is newer than the first apply and listed last, next to the prompt.
	runs := s.runs("manual")
	if len(runs) < 2 || runs[len(runs)-1].Name != planRun.Name {
		t.Fatalf("runs are not oldest first: %v", names(runs))
	}
	table := s.captf("", "", "runs", "manual")
	if table.err != nil || !strings.Contains(table.stdout, "NEXT-RETRY") || strings.Index(table.stdout, planRun.Name) < strings.Index(table.stdout, runs[0].Name) {
		t.Fatalf("runs table: %s", table)
	}
	t.Logf("kubectl captf runs manual:\n%s", table.stdout)

	// plan: the summary and its resources.
	var shown result
	s.eventually("the plan awaits approval", time.Minute, func() (bool, error) {
		shown = s.captf("", "", "plan", planRun.Name)
		return shown.err == nil && strings.Contains(shown.stdout, "AwaitingApproval"), nil
	})
	for _, want := range []string{"Target:    TerraformCluster/manual", "Hash:      p3:", "0 to add, 1 to change, 0 to destroy", "update"} {
		if !strings.Contains(shown.stdout, want) {
			t.Errorf("plan output lacks %q:\n%s", want, shown.stdout)
		}
	}

	t.Logf("kubectl captf plan %s:\n%s", planRun.Name, shown.stdout)
	approver := s.Approver("alice")
	// Answering n writes nothing.
	declined := s.captf(approver, "n\n", "approve", planRun.Name)
	if declined.err != nil || !strings.Contains(declined.stdout, "[y/N]") || !strings.Contains(declined.stdout, "Not approved") {
		t.Fatalf("declined approve: %s", declined)
	}
	if err := s.C.Get(s.Ctx, client.ObjectKeyFromObject(tc), tc); err != nil {
		t.Fatal(err)
	}
	if v, ok := tc.Annotations["captf.io/approve-plan"]; ok {
		t.Fatalf("declining wrote captf.io/approve-plan=%s", v)
	}
	// Writing the approval by hand is refused by the install's admission policy, even for an
	// admin: only the approval the plugin POSTs passes.
	selfApproval := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"captf.io/approve-plan":"p2:`+strings.Repeat("0", 64)+`"}}}`))
	s.eventually("the approval policy refuses a hand-written approval", time.Minute, func() (bool, error) {
		err := s.C.Patch(s.Ctx, tc.DeepCopy(), selfApproval, client.DryRunAll)
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "metadata.annotations[captf.io/approve-plan]") && strings.Contains(err.Error(), "kubectl captf approve"), nil
	})

	// A hash that is not the plan's is a clear 409 with the server's message.
	wrong := s.captf(approver, "", "approve", planRun.Name, "--yes", "--hash=p3:"+strings.Repeat("0", 64))
	if wrong.err == nil || !strings.Contains(wrong.stderr, "409 Conflict") || !strings.Contains(wrong.stderr, "review the plan again") {
		t.Fatalf("approving a wrong hash: %s", wrong)
	}
	t.Logf("approve --hash=<wrong>: %s", wrong.stderr)
	// An unknown plan is a clear 404.
	if missing := s.captf(approver, "", "approve", "no-such-plan", "--yes"); missing.err == nil || !strings.Contains(missing.stderr, `plan "no-such-plan" not found`) {
		t.Fatalf("approving a missing plan: %s", missing)
	}

	// New inputs supersede the plan: approving it is a clear 409, the new plan is approvable.
	s.PatchVariables(tc, `{"name":"manual","size":"xlarge"}`)
	newPlan := s.waitRun("manual", "plan", 2, runsv1alpha1.RunPhaseSucceeded)
	s.eventually("the first plan is superseded", time.Minute, func() (bool, error) {
		r := s.captf("", "", "plan", planRun.Name)
		return r.err == nil && strings.Contains(r.stdout, "Superseded"), nil
	})
	superseded := s.captf(approver, "", "approve", planRun.Name, "--yes")
	if superseded.err == nil || !strings.Contains(superseded.stderr, "409 Conflict") || !strings.Contains(superseded.stderr, "not the current plan") ||
		!strings.Contains(superseded.stderr, "The current plan of TerraformCluster/manual is "+newPlan.Name) {
		t.Fatalf("approving a superseded plan: %s", superseded)
	}
	t.Logf("approve <superseded>: %s", superseded.stderr)
	s.eventually("the new plan awaits approval", time.Minute, func() (bool, error) {
		r := s.captf("", "", "plan", newPlan.Name)
		return r.err == nil && strings.Contains(r.stdout, "AwaitingApproval"), nil
	})
	planRun = newPlan

	approved := s.captf(approver, "", "approve", planRun.Name, "--yes")
	if approved.err != nil || !strings.Contains(approved.stdout, "Approved plan "+planRun.Name) || !strings.Contains(approved.stdout, "alice") {
		t.Fatalf("approve --yes: %s", approved)
	}
	apply := s.waitRun("manual", "apply", 2, runsv1alpha1.RunPhaseSucceeded, runsv1alpha1.RunPhaseFailed, runsv1alpha1.RunPhasePlanChanged)
	if apply.Status.Phase != runsv1alpha1.RunPhaseSucceeded {
		t.Fatalf("the approved apply: %+v", apply.Status)
	}
	// Once applied, the plan is not approvable any more: a 409 naming the reason.
	again := s.captf(approver, "", "approve", planRun.Name, "--yes")
	if again.err == nil || !strings.Contains(again.stderr, "409 Conflict") {
		t.Fatalf("approving an applied plan: %s", again)
	}
	t.Logf("approve after apply: %s", again.stderr)
}

// TestWhyExplainsUpToDateThenBackoff: a converged cluster is UpToDate; after its inputs change
// to a failing module the apply fails and `why` and `runs` show the one-minute backoff.
func TestWhyExplainsUpToDateThenBackoff(t *testing.T) {
	s := newSuite(t)
	tc := s.Cluster("web", `{"name":"web"}`)
	s.waitRun("web", "apply", 1, runsv1alpha1.RunPhaseSucceeded)
	out := s.waitWhy("web", regexp.MustCompile(`Decision: start nothing \(UpToDate\)`))
	if !strings.Contains(out, "the state matches the current inputs") || !strings.Contains(out, "1 resource(s)") {
		t.Fatalf("why of a converged cluster:\n%s", out)
	}

	t.Logf("kubectl captf why web (converged):\n%s", out)
	for _, bad := range []struct {
		name string
		args []string
		want string
	}{
		{name: "an unknown object is named", args: []string{"why", "nosuch"}, want: `TerraformCluster "nosuch" not found in namespace ` + s.NS},
		{name: "an unknown kind lists the kinds", args: []string{"why", "web", "--kind=bogus"}, want: "cluster, machine or machinepool"},
		{name: "the kind flag picks the kind", args: []string{"why", "web", "--kind=machine"}, want: `TerraformMachine "web" not found`},
	} {
		if r := s.captf("", "", bad.args...); r.err == nil || !strings.Contains(r.stderr, bad.want) {
			t.Errorf("%s: %s", bad.name, r)
		}
	}
	s.PatchVariables(tc, `{"name":"web","fail":true}`)
	failed := s.waitRun("web", "apply", 2, runsv1alpha1.RunPhaseFailed, runsv1alpha1.RunPhaseSucceeded)
	if failed.Status.Phase != runsv1alpha1.RunPhaseFailed {
		t.Fatalf("the failing apply: %+v", failed.Status)
	}
	out = s.waitWhy("web", regexp.MustCompile(`Decision: wait for the backoff window \(InputsChangedBackoff\)`))
	for _, want := range []string{"1 counted failure(s), delay 1m0s", "cannot be skipped", "apply: 1 failure(s), delay 1m0s, open, retry in "} {
		if !strings.Contains(out, want) {
			t.Errorf("why of a failing cluster lacks %q:\n%s", want, out)
		}
	}
	t.Logf("kubectl captf why web (failing):\n%s", out)
	table := s.captf("", "", "runs", "web")
	if table.err != nil || !regexp.MustCompile(`NEXT-RETRY\n(?s:.*)`+failed.Name+` .*Failed .* \d+s\n`).MatchString(table.stdout) {
		t.Fatalf("runs does not show the time left in the backoff window: %s", table)
	}
	t.Logf("kubectl captf runs web:\n%s", table.stdout)
}

// TestLogsFindsTheRunsPod: `logs` finds the newest pod of the run's Job and reads its source
// container through pods/log. The node agent of test/system runs pods as local processes and
// serves no kubelet log endpoint, so the read itself fails there: the test pins the clear error
// that names the pod and container. Streaming is covered in cmd/kubectl-captf/app's unit test.
func TestLogsPrintsTheRunsOutput(t *testing.T) {
	s := newSuite(t)
	s.Cluster("logs", `{"name":"logs"}`)
	run := s.waitRun("logs", "apply", 1, runsv1alpha1.RunPhaseSucceeded)
	r := s.captf("", "", "logs", run.Name)
	if r.err != nil || !strings.Contains(r.stdout, "Apply complete!") {
		t.Fatalf("kubectl captf logs %s did not print OpenTofu's output: %s", run.Name, r)
	}
	if init := s.captf("", "", "logs", run.Name, "--init"); init.err != nil {
		t.Fatalf("logs --init: %s", init)
	}
	if follow := s.captf("", "", "logs", run.Name, "-f"); follow.err != nil || !strings.Contains(follow.stdout, "Apply complete!") {
		t.Fatalf("logs -f of a finished run: %s", follow)
	}
	if missing := s.captf("", "", "logs", "no-such-run"); missing.err == nil || !strings.Contains(missing.stderr, "run no-such-run has no pod") {
		t.Fatalf("logs of a missing run: %s", missing)
	}
}

func names(runs []runsv1alpha1.Run) []string {
	var out []string
	for _, r := range runs {
		out = append(out, r.Name)
	}
	return out
}

// TestWhyExplainsWhatClusterAPIHasNotProvided: a machine nobody owns waits for its Machine, and
// one whose Machine has no bootstrap data yet waits for that; `why` names the wait.
func TestWhyExplainsWhatClusterAPIHasNotProvided(t *testing.T) {
	s := newSuite(t)
	machine := func(name string) *infrav1.TerraformMachine {
		m := &infrav1.TerraformMachine{}
		m.Name, m.Namespace = name, s.NS
		m.Spec.Source.Image = system.SampleNoopImage
		return m
	}
	if err := s.C.Create(s.Ctx, machine("orphan")); err != nil {
		t.Fatal(err)
	}
	out := s.waitWhyKind("orphan", "machine", regexp.MustCompile(`Waits for: WaitingForOwner: waiting for Cluster API to make a Machine the owner`))
	if !strings.Contains(out, "Decision: start nothing (DependenciesNotReady)") {
		t.Fatalf("why of a machine without an owner:\n%s", out)
	}
	unready := machine("unready")
	if err := capitest.Own(s.Ctx, s.C, unready); err != nil {
		t.Fatal(err)
	}
	if err := s.C.Delete(s.Ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.NS, Name: "unready-bootstrap"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.C.Create(s.Ctx, unready); err != nil {
		t.Fatal(err)
	}
	out = s.waitWhyKind("unready", "machine", regexp.MustCompile(`Waits for: WaitingForBootstrapData: waiting for the bootstrap data Secret unready-bootstrap of Machine unready`))
	t.Logf("kubectl captf why unready --kind=machine:\n%s", out)
}

func (s *suite) waitWhyKind(target, kind string, want *regexp.Regexp) string {
	s.T.Helper()
	var last result
	s.eventually(fmt.Sprintf("why %s matches %s", target, want), 2*time.Minute, func() (bool, error) {
		last = s.captf("", "", "why", target, "--kind="+kind)
		return last.err == nil && want.MatchString(last.stdout), nil
	})
	return last.stdout
}

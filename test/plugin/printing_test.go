package plugin

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	runsv1alpha1 "github.com/captf/captf/apis/runs/v1alpha1"
	"github.com/captf/captf/test/system"
)

// TestRunsAndPlansPrintWhatKubectlGetPrints: `kubectl captf runs TARGET` and `plans TARGET`
// print byte for byte what `kubectl get` prints for the same field selector and order, in
// every output format. The tables show ages, so each pair is read until two reads agree.
func TestRunsAndPlansPrintWhatKubectlGetPrints(t *testing.T) {
	s := newSuite(t)
	tc := s.Cluster("print", `{"name":"print"}`, func(c *infrav1.TerraformCluster) { c.Spec.ApplyPolicy = infrav1.ApplyPolicyManual })
	s.Cluster("demo", `{"name":"demo"}`)
	s.waitRun("print", "apply", 1, runsv1alpha1.RunPhaseSucceeded)
	s.waitRun("demo", "apply", 1, runsv1alpha1.RunPhaseSucceeded)
	t.Logf("kubectl captf runs demo:\n%s", s.captf("", "", "runs", "demo").stdout)
	s.PatchVariables(tc, `{"name":"print","size":"large"}`)
	s.waitRun("print", "plan", 1, runsv1alpha1.RunPhaseSucceeded)

	for _, resource := range []string{"runs", "plans"} {
		for _, format := range [][]string{
			nil,
			{"-o", "wide"},
			{"-o", "yaml"},
			{"-o", "json"},
			{"-o", "name"},
			{"-o", "jsonpath={range .items[*]}{.metadata.name} {.status.phase}{\"\\n\"}{end}"},
			{"-o", "custom-columns=NAME:.metadata.name,TARGET:.spec.target.name,PHASE:.status.phase"},
			{"--no-headers"},
			{"--show-kind", "--show-labels"},
			{"--sort-by=.metadata.name"},
		} {
			t.Run(strings.Join(append([]string{resource}, format...), " "), func(t *testing.T) {
				plugin := append([]string{resource, "print"}, format...)
				get := append([]string{resource, "--field-selector=spec.target.name=print"}, format...)
				if !hasSortBy(format) {
					get = append(get, "--sort-by=.metadata.creationTimestamp")
				}
				s.sameOutput(plugin, get)
			})
		}
	}
	t.Run("--kind narrows by the target's kind", func(t *testing.T) {
		s.sameOutput([]string{"runs", "--kind=cluster"}, []string{"runs", "--field-selector=spec.target.kind=TerraformCluster", "--sort-by=.metadata.creationTimestamp"})
		if r := s.captf("", "", "runs", "print", "--kind=machine"); r.err != nil || r.stdout != "" || !strings.Contains(r.stderr, "No resources found in "+s.NS+" namespace.") {
			t.Errorf("runs of a machine named print: %s", r)
		}
	})
	t.Run("-l and --field-selector narrow further", func(t *testing.T) {
		s.sameOutput([]string{"runs", "print", "--field-selector=status.phase=Succeeded", "-l", "captf.infrastructure.cluster.x-k8s.io/op=plan"},
			[]string{"runs", "--field-selector=status.phase=Succeeded,spec.target.name=print", "-l", "captf.infrastructure.cluster.x-k8s.io/op=plan", "--sort-by=.metadata.creationTimestamp"})
	})
	t.Run("-A lists every namespace", func(t *testing.T) {
		s.sameOutput([]string{"plans", "-A"}, []string{"plans", "-A", "--sort-by=.metadata.creationTimestamp"})
	})

	table := s.captf("", "", "runs", "print")
	t.Logf("kubectl captf runs print:\n%s", table.stdout)
	t.Logf("kubectl captf runs print -o wide:\n%s", s.captf("", "", "runs", "print", "-o", "wide").stdout)
	t.Logf("kubectl captf plans print:\n%s", s.captf("", "", "plans", "print").stdout)
}

func hasSortBy(args []string) bool {
	for _, a := range args {
		if strings.HasPrefix(a, "--sort-by") {
			return true
		}
	}
	return false
}

// sameOutput reads `kubectl captf PLUGIN` and `kubectl get GET` until both succeed with the
// same stdout and stderr.
func (s *suite) sameOutput(plugin, get []string) {
	s.T.Helper()
	var a, b result
	s.eventually(fmt.Sprintf("kubectl captf %v prints what kubectl get %v prints", plugin, get), 30*time.Second, func() (bool, error) {
		a, b = s.captf("", "", plugin...), s.get(get...)
		return a.err == nil && b.err == nil && a.stdout == b.stdout && a.stderr == b.stderr, nil
	})
	if a.stdout == "" {
		s.T.Errorf("kubectl captf %v printed nothing: %s", plugin, a)
	}
}

// TestRunsWatchPrintsNewRuns: `runs TARGET -w` prints the runs, then each change of them, like
// kubectl get -w.
func TestRunsWatchPrintsNewRuns(t *testing.T) {
	s := newSuite(t)
	tc := s.Cluster("watched", `{"name":"watched"}`, func(c *infrav1.TerraformCluster) { c.Spec.ApplyPolicy = infrav1.ApplyPolicyManual })
	first := s.waitRun("watched", "apply", 1, runsv1alpha1.RunPhaseSucceeded)

	ctx, cancel := context.WithTimeout(s.Ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(sys.Env.BinDir, "kubectl"), "captf", "--kubeconfig="+sys.Env.Kubeconfig, "-n", s.NS, "runs", "watched", "-w")
	cmd.Env = append(os.Environ(), "PATH="+pluginDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Wait() }()
	defer cancel()
	lines := make(chan string)
	go func() {
		defer close(lines)
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			select {
			case lines <- scanner.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	// next returns the first line printed that contains all of want.
	var printed []string
	next := func(want ...string) {
		t.Helper()
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("the watch ended before a line with %q; it printed:\n%s\nstderr: %s", want, strings.Join(printed, "\n"), stderr.String())
				}
				printed = append(printed, line)
				if containsAll(line, want) {
					return
				}
			case <-ctx.Done():
				t.Fatalf("no line with %q; the watch printed:\n%s\nstderr: %s", want, strings.Join(printed, "\n"), stderr.String())
			}
		}
	}
	next("NAME", "TARGET", "NEXT-RETRY")
	next(first.Name, "Succeeded")
	s.PatchVariables(tc, `{"name":"watched","size":"large"}`)
	next("TerraformCluster/watched", "plan", "Succeeded")
	if strings.Contains(stderr.String(), "sort-by") {
		t.Errorf("a watch warns about a --sort-by nobody asked for: %s", stderr.String())
	}
	t.Logf("kubectl captf runs watched -w:\n%s", strings.Join(printed, "\n"))
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// TestCompletionOffersNamesFromTheCluster: kubectl runs kubectl_complete-captf from PATH for
// `kubectl captf <TAB>`, and the plugin answers with the names of the user's namespace.
func TestCompletionOffersNamesFromTheCluster(t *testing.T) {
	s := newSuite(t)
	tc := s.Cluster("complete", `{"name":"complete"}`, func(c *infrav1.TerraformCluster) { c.Spec.ApplyPolicy = infrav1.ApplyPolicyManual })
	apply := s.waitRun("complete", "apply", 1, runsv1alpha1.RunPhaseSucceeded)
	s.PatchVariables(tc, `{"name":"complete","size":"large"}`)
	plan := s.waitRun("complete", "plan", 1, runsv1alpha1.RunPhaseSucceeded)
	s.eventually("the plan awaits approval", time.Minute, func() (bool, error) {
		r := s.captf("", "", "plan", plan.Name)
		return r.err == nil && strings.Contains(r.stdout, "AwaitingApproval"), nil
	})

	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{name: "runs completes object names", args: []string{"runs", ""}, want: []string{"complete"}},
		{name: "plans completes object names", args: []string{"plans", "c"}, want: []string{"complete"}},
		{name: "why completes the names of its --kind", args: []string{"why", "--kind=machine", ""}},
		{name: "logs completes run names", args: []string{"logs", ""}, want: []string{apply.Name, plan.Name}},
		{name: "plan completes plan names", args: []string{"plan", ""}, want: []string{plan.Name}},
		{name: "approve completes the plans awaiting approval", args: []string{"approve", ""}, want: []string{plan.Name}},
		{name: "--kind completes the kinds", args: []string{"runs", "--kind", "m"}, want: []string{"machine\tTerraformMachine", "machinepool\tTerraformMachinePool"}},
		{name: "a command's name completes", args: []string{"pla"}, want: []string{"plan\t", "plans\t"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(s.Ctx, time.Minute)
			defer cancel()
			r := s.kubectl(ctx, "", append([]string{"__complete", "captf", "--kubeconfig=" + sys.Env.Kubeconfig, "-n", s.NS}, c.args...)...)
			if r.err != nil {
				t.Fatalf("kubectl __complete captf %v: %s", c.args, r)
			}
			t.Logf("kubectl __complete captf %s:\n%s", strings.Join(c.args, " "), r.stdout)
			got := strings.Split(strings.TrimSpace(r.stdout), "\n")
			if len(got) == 0 || got[len(got)-1] != ":4" {
				t.Errorf("directive: want :4 (no file completion):\n%s", r.stdout)
			}
			got = got[:len(got)-1]
			if len(c.want) == 0 && len(got) > 0 {
				t.Errorf("completions = %q, want none", got)
			}
			for _, want := range c.want {
				found := false
				for _, g := range got {
					found = found || strings.HasPrefix(g, want)
				}
				if !found {
					t.Errorf("completions %q lack %q", got, want)
				}
			}
			if c.name == "approve completes the plans awaiting approval" && len(got) != 1 {
				t.Errorf("approve offers %q, want only the plan awaiting approval", got)
			}
		})
	}
}

// TestErrorsSayWhatToDoNext: a user without rights is told the role to bind and the command
// that binds it, which works; an unavailable runs API is told how to check it.
func TestErrorsSayWhatToDoNext(t *testing.T) {
	s := newSuite(t)
	s.Cluster("advice", `{"name":"advice"}`)
	s.waitRun("advice", "apply", 1, runsv1alpha1.RunPhaseSucceeded)
	_, nobody, err := sys.Env.AddUser("nobody")
	if err != nil {
		t.Fatal(err)
	}

	denied := s.captf(nobody, "", "runs", "advice")
	bind := "kubectl create rolebinding captf-runs-view-nobody --clusterrole=captf-runs-view --user=nobody --namespace=" + s.NS
	if denied.err == nil || !strings.Contains(denied.stderr, "is forbidden") || !strings.Contains(denied.stderr, "ClusterRole captf-runs-view grants it") || !strings.Contains(denied.stderr, bind) {
		t.Fatalf("runs without rights: %s", denied)
	}
	t.Logf("kubectl captf runs advice (no rights):\n%s", denied.stderr)
	// The command the advice prints is the one that fixes it.
	ctx, cancel := context.WithTimeout(s.Ctx, time.Minute)
	defer cancel()
	if r := s.kubectl(ctx, "", append(strings.Fields(bind)[1:], "--kubeconfig="+sys.Env.Kubeconfig)...); r.err != nil {
		t.Fatalf("%s: %s", bind, r)
	}
	s.eventually("the binding lets nobody list runs", time.Minute, func() (bool, error) {
		r := s.captf(nobody, "", "runs", "advice")
		return r.err == nil && strings.Contains(r.stdout, "TerraformCluster/advice"), nil
	})
	approve := s.captf(nobody, "", "plans", "advice")
	if approve.err == nil || !strings.Contains(approve.stderr, "--clusterrole=captf-plan-approver --user=nobody") {
		t.Fatalf("plans without rights: %s", approve)
	}
	why := s.captf(nobody, "", "why", "advice")
	if why.err == nil || !strings.Contains(why.stderr, "kubectl auth can-i get terraformclusters.infrastructure.cluster.x-k8s.io --namespace="+s.NS) {
		t.Fatalf("why without rights: %s", why)
	}
	t.Logf("kubectl captf why advice (no rights):\n%s", why.stderr)

	t.Run("an unavailable runs API", func(t *testing.T) {
		s.breakAPIService()
		r := s.captf("", "", "runs", "advice")
		if r.err == nil || !strings.Contains(r.stderr, "kubectl get apiservice v1alpha1.runs.captf.io") || !strings.Contains(r.stderr, "kubectl -n captf-system get deployment captf-apiserver") {
			t.Fatalf("runs while the API is unavailable: %s", r)
		}
		t.Logf("kubectl captf runs advice (API unavailable):\n%s", r.stderr)
	})
}

// breakAPIService points the APIService at a port nobody serves until the test ends, then
// restores it and waits until it is Available again.
func (s *suite) breakAPIService() {
	s.T.Helper()
	ctx, cancel := context.WithTimeout(s.Ctx, time.Minute)
	defer cancel()
	r := s.kubectl(ctx, "", "--kubeconfig="+sys.Env.Kubeconfig, "get", "apiservice", system.APIServiceName, "-o", "jsonpath={.spec.service.port}")
	if r.err != nil {
		s.T.Fatalf("reading the APIService: %s", r)
	}
	port := strings.TrimSpace(r.stdout)
	patch := func(ctx context.Context, port string) result {
		return s.kubectl(ctx, "", "--kubeconfig="+sys.Env.Kubeconfig, "patch", "apiservice", system.APIServiceName, "--type=merge", "-p", `{"spec":{"service":{"port":`+port+`}}}`)
	}
	s.T.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if r := patch(ctx, port); r.err != nil {
			s.T.Fatalf("restoring the APIService: %s", r)
		}
		if err := sys.Env.WaitForAPIService(ctx, system.APIServiceName, 2*time.Minute); err != nil {
			s.T.Fatal(err)
		}
	})
	if r := patch(ctx, "1"); r.err != nil {
		s.T.Fatalf("breaking the APIService: %s", r)
	}
	s.eventually("the runs API stops answering", 2*time.Minute, func() (bool, error) {
		r := s.get("runs.runs.captf.io")
		return r.err != nil, nil
	})
}

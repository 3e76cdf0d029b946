package aggregated

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/captf/captf/apis/runs/v1alpha1"
	"github.com/captf/captf/jobs"
)

// history is a TerraformCluster with an apply that succeeded, two that failed since (the
// newest a minute ago, in backoff), a running drift check and a pending refresh.
type history struct {
	ns                             string
	ok, fail1, fail2, drift, fresh string
}

func newHistory(t *testing.T, c clients) history {
	t.Helper()
	ns := c.newNamespace(t)
	web := c.createCluster(t, ns, "web", nil)
	now := time.Now()
	h := history{ns: ns}
	ok := c.createJob(t, web, jobs.OpApply, 1, nil)
	c.setJob(t, ok, jobSucceeded, now.Add(-50*time.Minute), resultAnnotations(t, jobs.Summary{Changes: &jobs.Changes{Add: 3}}))
	f1 := c.createJob(t, web, jobs.OpApply, 2, nil)
	c.setJob(t, f1, jobFailed, now.Add(-20*time.Minute), resultAnnotations(t, jobs.Summary{Error: &jobs.ErrorSummary{Kind: jobs.ErrorKindStep, Step: "apply", Summary: "quota exceeded"}}))
	f2 := c.createJob(t, web, jobs.OpApply, 3, nil)
	c.setJob(t, f2, jobDeadline, now.Add(-time.Minute), nil)
	drift := c.createJob(t, web, jobs.OpDrift, 1, nil)
	c.setJob(t, drift, jobRunning, now, nil)
	fresh := c.createJob(t, web, jobs.OpRefresh, 1, nil)
	h.ok, h.fail1, h.fail2, h.drift, h.fresh = ok.Name, f1.Name, f2.Name, drift.Name, fresh.Name
	// The server's cache follows the Jobs; wait until it shows the last write.
	eventually(t, 10*time.Second, func(context.Context) error {
		out, err := kubectl(t, "get", "runs", "-n", ns, "-o", "name")
		if err != nil {
			return fmt.Errorf("runs: %w %s", err, out)
		}
		if strings.Count(out, "run.runs.captf.io/") != 5 {
			return fmt.Errorf("runs: %s", out)
		}
		out, err = kubectl(t, "get", "run", "-n", ns, h.drift, "-o", "jsonpath={.status.phase}")
		if err != nil {
			return fmt.Errorf("drift phase: %w %s", err, out)
		}
		if out != "Running" {
			return fmt.Errorf("drift phase: %s", out)
		}
		return nil
	})
	return h
}

func TestKubectlGetRunsShowsTheTable(t *testing.T) {
	h := newHistory(t, newClients(t))
	out := mustKubectl(t, "get", "runs", "-n", h.ns)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if got := strings.Fields(lines[0]); strings.Join(got, " ") != "NAME TARGET OP ATTEMPT RETRY PHASE AGE DURATION NEXT-RETRY" {
		t.Fatalf("header = %q", lines[0])
	}
	rows := map[string][]string{}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		rows[f[0]] = f
	}
	tests := []struct {
		name string
		run  string
		want []string // TARGET OP ATTEMPT RETRY PHASE
	}{
		{name: "a success", run: h.ok, want: []string{"TerraformCluster/web", "apply", "1", "1", "Succeeded"}},
		{name: "the first failure after it", run: h.fail1, want: []string{"TerraformCluster/web", "apply", "2", "1", "Failed"}},
		{name: "a deadline is the second try", run: h.fail2, want: []string{"TerraformCluster/web", "apply", "3", "2", "DeadlineExceeded"}},
		{name: "a running drift check", run: h.drift, want: []string{"TerraformCluster/web", "drift", "1", "1", "Running"}},
		{name: "a Job that has not started", run: h.fresh, want: []string{"TerraformCluster/web", "refresh", "1", "1", "Pending"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			row := rows[tt.run]
			if len(row) != 9 || strings.Join(row[1:6], " ") != strings.Join(tt.want, " ") {
				t.Fatalf("row = %v, want %v", row, tt.want)
			}
		})
	}
	// Only the newest counted failure waits: 2 failures, 2 minutes from a minute ago.
	if next := rows[h.fail2][8]; next == "<none>" || !strings.HasSuffix(next, "s") {
		t.Errorf("NEXT-RETRY of the newest failure = %q, want about 60s", next)
	}
	if next := rows[h.fail1][8]; next != "<none>" {
		t.Errorf("NEXT-RETRY of the older failure = %q, want <none>", next)
	}
	wide := mustKubectl(t, "get", "runs", "-n", h.ns, "-o", "wide")
	if !strings.Contains(wide, "RETENTION") || !strings.Contains(wide, "UnresolvedFailure") || !strings.Contains(wide, "step/apply") {
		t.Errorf("-o wide lacks retention or error:\n%s", wide)
	}
}

func TestRunYAMLHasTheComputedFields(t *testing.T) {
	h := newHistory(t, newClients(t))
	out := mustKubectl(t, "get", "run", h.fail2, "-n", h.ns, "-o", "yaml")
	var run v1alpha1.Run
	if err := yaml.Unmarshal([]byte(out), &run); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	s := run.Status
	if s.RetryNumber != 2 || !s.CountsTowardBackoff || s.Retention != v1alpha1.RetentionUnresolvedFailure || s.Phase != v1alpha1.RunPhaseDeadlineExceeded {
		t.Errorf("status = %+v", s)
	}
	b := s.Backoff
	if b == nil || b.Failures != 2 || b.Delay.Duration != 2*time.Minute || !b.Active || b.RetryAfter.Sub(s.CompletionTime.Time) != 2*time.Minute {
		t.Errorf("backoff = %+v (completion %v)", b, s.CompletionTime)
	}
	if run.Spec.Target.Kind != "TerraformCluster" || run.Spec.Target.Name != "web" || run.Spec.Operation != "apply" || run.Spec.Attempt != 3 || run.Spec.InputsHash != inputsHash {
		t.Errorf("spec = %+v", run.Spec)
	}
	if run.APIVersion != "runs.captf.io/v1alpha1" || run.Kind != "Run" || run.ResourceVersion == "" || run.Labels[jobs.LabelOp] != "apply" {
		t.Errorf("type and metadata = %v %v %+v", run.APIVersion, run.Kind, run.ObjectMeta)
	}
	job, err := newClients(t).kube.BatchV1().Jobs(h.ns).Get(t.Context(), h.fail2, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if run.ResourceVersion != job.ResourceVersion || run.UID != job.UID {
		t.Errorf("run resourceVersion/uid %s/%s, Job's %s/%s", run.ResourceVersion, run.UID, job.ResourceVersion, job.UID)
	}

	var older v1alpha1.Run
	if err := yaml.Unmarshal([]byte(mustKubectl(t, "get", "run", h.fail1, "-n", h.ns, "-o", "yaml")), &older); err != nil {
		t.Fatal(err)
	}
	if older.Status.Backoff != nil || older.Status.Retention != v1alpha1.RetentionWithinLimit || older.Status.Error == nil || older.Status.Error.Summary != "quota exceeded" {
		t.Errorf("older failure status = %+v", older.Status)
	}
}

func TestKubectlWatchSeesCreationCompletionAndPruning(t *testing.T) {
	c := newClients(t)
	ns := c.newNamespace(t)
	web := c.createCluster(t, ns, "web", nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cmd := getEnv(t).Kubectl(ctx, "get", "runs", "-n", ns, "-w", "--output-watch-events", "--no-headers")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	lines := make(chan string, 100)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	// expectLine waits for the watch to print an event of the run in a phase.
	expectLine := func(event, name, phase string) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("kubectl get -w ended before %s %s %s", event, name, phase)
				}
				f := strings.Fields(l)
				if len(f) >= 7 && f[0] == event && f[1] == name && f[6] == phase {
					return
				}
			case <-deadline:
				t.Fatalf("kubectl get -w printed no %s %s %s", event, name, phase)
			}
		}
	}
	// kubectl lists first; wait until the (empty) list is done by watching for a first run.
	eventually(t, 10*time.Second, func(context.Context) error {
		out, err := kubectl(t, "get", "runs", "-n", ns)
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	})
	job := c.createJob(t, web, jobs.OpApply, 1, nil)
	expectLine("ADDED", job.Name, "Pending")
	job = c.setJob(t, job, jobRunning, time.Now(), nil)
	expectLine("MODIFIED", job.Name, "Running")
	c.setJob(t, job, jobSucceeded, time.Now(), resultAnnotations(t, jobs.Summary{Changes: &jobs.Changes{Add: 1}}))
	expectLine("MODIFIED", job.Name, "Succeeded")
	background := metav1.DeletePropagationBackground
	if err := c.kube.BatchV1().Jobs(ns).Delete(t.Context(), job.Name, metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
		t.Fatal(err)
	}
	expectLine("DELETED", job.Name, "Succeeded")
}

func TestSelectorsFilterRuns(t *testing.T) {
	h := newHistory(t, newClients(t))
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{name: "a label selector on the op", args: []string{"-l", jobs.LabelOp + "=drift"}, want: []string{h.drift}},
		{name: "a label selector on the attempt", args: []string{"-l", jobs.LabelAttempt + "=3"}, want: []string{h.fail2}},
		{name: "spec.operation", args: []string{"--field-selector", "spec.operation=apply"}, want: []string{h.ok, h.fail1, h.fail2}},
		{name: "status.phase", args: []string{"--field-selector", "status.phase=Failed"}, want: []string{h.fail1}},
		{name: "spec.target.name", args: []string{"--field-selector", "spec.target.name=web,status.phase!=Succeeded"}, want: []string{h.fail1, h.fail2, h.drift, h.fresh}},
		{name: "a target that has no runs", args: []string{"--field-selector", "spec.target.name=db"}, want: nil},
		{name: "labels and fields", args: []string{"-l", jobs.LabelOp + "=apply", "--field-selector", "status.phase=Succeeded"}, want: []string{h.ok}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := mustKubectl(t, append([]string{"get", "runs", "-n", h.ns, "-o", "jsonpath={.items[*].metadata.name}"}, tt.args...)...)
			if got := strings.Fields(out); strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Errorf("runs = %v, want %v", got, tt.want)
			}
		})
	}
	t.Run("an unsupported field selector is a clear 400", func(t *testing.T) {
		out, err := kubectl(t, "get", "runs", "-n", h.ns, "--field-selector", "status.retryNumber=1")
		if err == nil || !strings.Contains(out, "BadRequest") && !strings.Contains(out, "Bad Request") ||
			!strings.Contains(out, `"status.retryNumber" is not supported`) || !strings.Contains(out, "spec.operation") {
			t.Errorf("err = %v, output:\n%s", err, out)
		}
	})
}

func TestKubectlExplainPrintsTheFieldDocs(t *testing.T) {
	getEnv(t)
	tests := []struct {
		field string
		want  []string
	}{
		{field: "runs.status.backoff", want: []string{"KIND:       Run", "counted from when this run finished", "retryAfter is when the newest counted failure", "failures", "delay"}},
		{field: "runs.status.retryNumber", want: []string{"1 plus the failures of the same operation"}},
		{field: "plans.status.approvalHash", want: []string{"the value an approval must quote"}},
		{field: "tfplan.spec.source", want: []string{"BlockedApply"}},
	}
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			out := mustKubectl(t, "explain", tt.field)
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("kubectl explain %s lacks %q:\n%s", tt.field, w, out)
				}
			}
		})
	}
}

func TestDiscoveryNamesShortNamesCategoryAndVerbs(t *testing.T) {
	getEnv(t)
	out := mustKubectl(t, "api-resources", "--api-group=runs.captf.io", "-o", "wide")
	for _, want := range []string{"runs", "tfrun", "plans", "tfplan", "terraform", "get,list,watch"} {
		if !strings.Contains(out, want) {
			t.Errorf("api-resources lacks %q:\n%s", want, out)
		}
	}
	// The category brings runs and plans into kubectl get terraform, next to the CRDs.
	h := newHistory(t, newClients(t))
	if got := mustKubectl(t, "get", "terraform", "-n", h.ns, "-o", "name"); !strings.Contains(got, "run.runs.captf.io/"+h.ok) || !strings.Contains(got, "terraformcluster.infrastructure.cluster.x-k8s.io/web") {
		t.Errorf("kubectl get terraform:\n%s", got)
	}
}

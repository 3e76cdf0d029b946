package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	runsv1alpha1 "github.com/captf/captf/apis/runs/v1alpha1"
	"github.com/captf/captf/controller/jobspec"
	"github.com/captf/captf/jobs"
)

// stepsImage pushes the test module of testdata/modules/steps under ref, for one test.
func (s *suite) stepsImage(ref string) string {
	s.T.Helper()
	if _, err := sys.PushModuleImage(s.Ctx, ref, filepath.Join(sys.Env.RepoRoot, "test", "e2e", "testdata", "modules", "steps")); err != nil {
		s.T.Fatal(err)
	}
	return ref
}

// job returns the Job of a run.
func (s *suite) job(name string) batchv1.Job {
	s.T.Helper()
	var job batchv1.Job
	if err := s.C.Get(s.Ctx, client.ObjectKey{Namespace: s.NS, Name: name}, &job); err != nil {
		s.T.Fatal(err)
	}
	return job
}

// sourceImage is the image a Job's source container runs.
func sourceImage(job batchv1.Job) string {
	for _, c := range job.Spec.Template.Spec.Containers {
		if c.Name == jobspec.SourceContainer {
			return c.Image
		}
	}
	return ""
}

// interruptRunner sends SIGTERM to the runner of the run's pod, as a node does to a pod's main
// process when it shuts down: the pod fails and stays, with the runner's result in it.
func (s *suite) interruptRunner(job string) {
	s.T.Helper()
	var pod corev1.Pod
	s.Eventually("the pod of "+job+" runs", time.Minute, func(ctx context.Context) (bool, error) {
		var pods corev1.PodList
		if err := s.C.List(ctx, &pods, client.InNamespace(s.NS), client.MatchingLabels{batchv1.JobNameLabel: job}); err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			for _, cs := range p.Status.ContainerStatuses {
				if cs.Name == jobspec.SourceContainer && cs.State.Running != nil {
					pod = p
					return true, nil
				}
			}
		}
		return false, nil
	})
	var pid int
	// A signal that lands before the runner's handler is installed kills it without a result;
	// once OpenTofu runs as its child, the handler is there and the stop is a real interruption.
	s.Eventually("the runner process of "+pod.Name+" runs OpenTofu", time.Minute, func(context.Context) (bool, error) {
		pid = runnerProcess(pod.Name)
		return pid > 0 && hasChild(pid), nil
	})
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		s.T.Fatalf("signalling the runner (pid %d): %v", pid, err)
	}
}

// hasChild reports whether any process has pid as its parent.
func hasChild(pid int) bool {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The fields after the command's closing parenthesis are: state, ppid, ...
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			return true
		}
	}
	return false
}

// runnerProcess finds the runner the node agent started for a pod: its environment names the
// pod as HOSTNAME and its program is the runner.
func runnerProcess(pod string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(append([]byte{0}, env...), []byte("\x00HOSTNAME="+pod+"\x00")) {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if filepath.Base(args[0]) == "runner" && len(args) > 1 && args[1] == "run" {
			return pid
		}
	}
	return 0
}

// failThenRevert provisions a cluster on the steps module, fails an apply part-way (its extra
// resource created and tainted; with destroySleep, a slow resource beside it whose destroy takes
// that many seconds), then reverts the variables: the retry of the failed apply would delete the
// tainted resource, so the guard stops it. It approves that blocked plan through plans/approval
// and returns the run it approved.
func (s *suite) failThenRevert(name string, destroySleep int) runsv1alpha1.Run {
	s.T.Helper()
	image := s.stepsImage("ghcr.io/captf-test/steps-" + name + ":v1")
	tc := s.Cluster(name, fmt.Sprintf(`{"name":%q}`, name), func(c *infrav1.TerraformCluster) { c.Spec.Source.Image = image })
	s.waitRun(name, jobs.OpApply, 1, runsv1alpha1.RunPhaseSucceeded)
	s.PatchVariables(tc, fmt.Sprintf(`{"extra":true,"fail":true,"destroy_sleep":%d}`, destroySleep))
	s.waitRun(name, jobs.OpApply, 2, runsv1alpha1.RunPhaseFailed)
	s.PatchVariables(tc, `{"extra":null,"fail":null,"destroy_sleep":null}`)
	blocked := s.waitRun(name, jobs.OpApply, 3, runsv1alpha1.RunPhaseBlocked)
	if job := s.job(blocked.Name); job.Annotations[jobs.AnnotationAfterFailedApply] != "true" {
		s.T.Fatalf("the blocked apply is no retry of the failed one: %v", job.Annotations)
	}
	var plan runsv1alpha1.Plan
	out, err := s.kubectl("", "get", "plans", blocked.Name, "-o", "json")
	if err != nil {
		s.T.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		s.T.Fatal(err)
	}
	if plan.Status.Phase != runsv1alpha1.PlanPhaseAwaitingApproval || plan.Status.ApprovalHash == "" {
		s.T.Fatalf("the blocked retry's plan = %+v", plan.Status)
	}
	if out, err := s.approve(s.Approver("approver-"+name), plan.Name, plan.Status.ApprovalHash); err != nil {
		s.T.Fatalf("approving: %s %v", out, err)
	}
	return blocked
}

func TestABlockedRetryOfAFailedApplyAppliesOnceApproved(t *testing.T) {
	s := newSuite(t)
	s.failThenRevert("revert", 0)
	applied := s.waitRunResult("revert", jobs.OpApply, 4, true, runsv1alpha1.RunPhaseSucceeded, runsv1alpha1.RunPhaseFailed, runsv1alpha1.RunPhaseBlocked)
	if applied.Status.Phase != runsv1alpha1.RunPhaseSucceeded || applied.Status.Changes == nil || applied.Status.Changes.Destroy != 1 {
		t.Fatalf("the approved apply = %+v", applied.Status)
	}
}

func TestAnInterruptedApplyIsRetriedAtOnce(t *testing.T) {
	s := newSuite(t)
	s.failThenRevert("interrupted", 60)
	approved := s.waitRun("interrupted", jobs.OpApply, 4, runsv1alpha1.RunPhaseRunning)
	s.interruptRunner(approved.Name)
	s.waitRun("interrupted", jobs.OpApply, 4, runsv1alpha1.RunPhaseInterrupted)
	// Its inputs equal the state's: only LastApplyFailed retries it, at once, free of backoff.
	retry := s.waitRun("interrupted", jobs.OpApply, 5, runsv1alpha1.RunPhasePending, runsv1alpha1.RunPhaseRunning, runsv1alpha1.RunPhaseSucceeded)
	if retry.Status.Backoff != nil && retry.Status.Backoff.Active {
		t.Fatalf("the retry of an interrupted apply backed off: %+v", retry.Status.Backoff)
	}
	if job := s.job(retry.Name); job.Annotations[jobs.AnnotationAfterFailedApply] != "true" {
		t.Errorf("the retry is not marked as after a failed apply: %v", job.Annotations)
	}
	s.waitRun("interrupted", jobs.OpApply, 5, runsv1alpha1.RunPhaseSucceeded)
}

func TestAnApprovedApplyRunsTheCodeThatPlannedAfterTheTagMoves(t *testing.T) {
	s := newSuite(t)
	image := s.stepsImage("ghcr.io/captf-test/steps-pinned:v1")
	tc := s.Cluster("pinned", `{"name":"pinned"}`, func(c *infrav1.TerraformCluster) {
		c.Spec.Source.Image = image
		c.Spec.ApplyPolicy = infrav1.ApplyPolicyManual
	})
	s.waitRun("pinned", jobs.OpApply, 1, runsv1alpha1.RunPhaseSucceeded)
	s.PatchVariables(tc, `{"extra":true}`)
	planRun := s.waitRun("pinned", jobs.OpPlan, 1, runsv1alpha1.RunPhaseSucceeded)
	var plan runsv1alpha1.Plan
	s.Eventually("the plan waits for approval", time.Minute, func(context.Context) (bool, error) {
		out, err := s.kubectl("", "get", "plans", planRun.Name, "-o", "json")
		if err != nil {
			return false, nil
		}
		if err := json.Unmarshal([]byte(out), &plan); err != nil {
			return false, err
		}
		return plan.Status.Phase == runsv1alpha1.PlanPhaseAwaitingApproval, nil
	})
	planned := s.job(planRun.Name).Annotations[jobs.AnnotationImageDigest]
	if !jobs.ValidDigest(planned) {
		t.Fatalf("the plan Job records no image digest: %v", s.job(planRun.Name).Annotations)
	}
	// The tag now names other code: the sample module, whose plan would differ.
	moved, err := sys.PushModuleImage(s.Ctx, image, filepath.Join(sys.Env.RepoRoot, "artifacts", "samples", "modules", "noop"))
	if err != nil {
		t.Fatal(err)
	}
	if moved == planned {
		t.Fatal("pushing other code kept the digest")
	}
	if out, err := s.approve(s.Approver("dave"), plan.Name, plan.Status.PlanHash); err != nil {
		t.Fatalf("approving: %s %v", out, err)
	}
	applied := s.waitRunResult("pinned", jobs.OpApply, 2, true, runsv1alpha1.RunPhaseSucceeded, runsv1alpha1.RunPhaseFailed, runsv1alpha1.RunPhasePlanChanged)
	if got, want := sourceImage(s.job(applied.Name)), jobs.PinnedReference(image, planned); got != want {
		t.Fatalf("the approved apply ran %q, want the plan's %q", got, want)
	}
	if applied.Status.Phase != runsv1alpha1.RunPhaseSucceeded {
		t.Fatalf("the approved apply = %+v", applied.Status)
	}
	var cur infrav1.TerraformCluster
	if err := s.C.Get(s.Ctx, client.ObjectKeyFromObject(tc), &cur); err != nil {
		t.Fatal(err)
	}
	if cur.Status.Source == nil || cur.Status.Source.Digest != planned {
		t.Fatalf("status.source = %+v, want the digest %s pinned", cur.Status.Source, planned)
	}
}

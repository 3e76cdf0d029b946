package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	runsv1alpha1 "github.com/captf/captf/apis/runs/v1alpha1"
	"github.com/captf/captf/cmd/kubectl-captf/app"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
)

// mustCaptf runs `kubectl captf ARGS` and fails the test unless it succeeds and prints want.
func (s *suite) mustCaptf(kubeconfig, stdin string, want []string, args ...string) result {
	s.T.Helper()
	r := s.captf(kubeconfig, stdin, args...)
	if r.err != nil {
		s.T.Fatalf("kubectl captf %s: %s", strings.Join(args, " "), r)
	}
	for _, w := range want {
		if !strings.Contains(r.stdout, w) {
			s.T.Fatalf("kubectl captf %s prints no %q:\n%s", strings.Join(args, " "), w, r)
		}
	}
	s.T.Logf("$ kubectl captf %s\n%s", strings.Join(args, " "), r.stdout)
	return r
}

// failCaptf runs `kubectl captf ARGS` and fails the test unless it fails with want on stderr.
func (s *suite) failCaptf(kubeconfig, stdin, want string, args ...string) result {
	s.T.Helper()
	r := s.captf(kubeconfig, stdin, args...)
	if r.err == nil || !strings.Contains(r.stderr, want) {
		s.T.Fatalf("kubectl captf %s: want a failure with %q, got %s", strings.Join(args, " "), want, r)
	}
	s.T.Logf("$ kubectl captf %s\n%s%s", strings.Join(args, " "), r.stdout, r.stderr)
	return r
}

// userWithRole creates a user bound in the suite's namespace to a ClusterRole of the install
// only, and returns its kubeconfig.
func (s *suite) userWithRole(name, role string) string {
	s.T.Helper()
	_, kubeconfig, err := s.Sys.Env.AddUser(name)
	if err != nil {
		s.T.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.NS},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}},
	}
	if err := s.C.Create(s.Ctx, binding); err != nil {
		s.T.Fatal(err)
	}
	return kubeconfig
}

// runOf returns target's run of op and attempt, if it exists.
func (s *suite) runOf(target, op string, attempt int32) (runsv1alpha1.Run, bool) {
	s.T.Helper()
	// The suite's client knows no runs.captf.io; the plugin's scheme does.
	c, err := client.New(sys.Env.Config, client.Options{Scheme: app.Scheme()})
	if err != nil {
		s.T.Fatal(err)
	}
	var list runsv1alpha1.RunList
	if err := c.List(s.Ctx, &list, client.InNamespace(s.NS), client.MatchingFields{"spec.target.name": target}); err != nil {
		s.T.Fatal(err)
	}
	for _, r := range list.Items {
		if r.Spec.Operation == op && r.Spec.Attempt == attempt {
			return r, true
		}
	}
	return runsv1alpha1.Run{}, false
}

// awaitRun waits until target's run of op and attempt reaches one of phases.
func (s *suite) awaitRun(target, op string, attempt int32, timeout time.Duration, phases ...runsv1alpha1.RunPhase) runsv1alpha1.Run {
	s.T.Helper()
	var found runsv1alpha1.Run
	s.Eventually(fmt.Sprintf("%s run %d of %s reaches %v", op, attempt, target, phases), timeout, func(context.Context) (bool, error) {
		r, ok := s.runOf(target, op, attempt)
		for _, p := range phases {
			if ok && r.Status.Phase == p {
				found = r
				return true, nil
			}
		}
		return false, nil
	})
	return found
}

// TestVerbsHelpIsGrouped: the root help groups the commands as kubectl groups its own.
func TestVerbsHelpIsGrouped(t *testing.T) {
	s := newSuite(t)
	help := s.mustCaptf("", "", []string{"Inspect runs and plans:", "Operate on objects:", "suspend", "unlock", "history"}, "--help")
	if strings.Index(help.stdout, "Operate on objects:") > strings.Index(help.stdout, "  unlock") {
		t.Errorf("unlock is not listed under Operate on objects:\n%s", help.stdout)
	}
	s.mustCaptf("", "", []string{"Rights needed:", "captf-state-unlocker", "Examples:"}, "unlock", "--help")
}

// TestVerbsSuspendAndResume: an operator suspends a cluster, `why` says so, a spec change starts
// no run while it is suspended, and resuming applies it.
func TestVerbsSuspendAndResume(t *testing.T) {
	s := newSuite(t)
	tc := s.Cluster("pause", `{"name":"pause"}`)
	s.awaitRun("pause", "apply", 1, 3*time.Minute, runsv1alpha1.RunPhaseSucceeded)
	operator := s.userWithRole("operator", app.RoleOperator)

	s.mustCaptf(operator, "", []string{"Suspended TerraformCluster/pause", "kubectl captf resume pause"}, "suspend", "pause")
	s.mustCaptf(operator, "", []string{"already suspended"}, "suspend", "pause")
	s.PatchVariables(tc, `{"name":"pause","size":"large"}`)
	if err := s.C.Get(s.Ctx, client.ObjectKeyFromObject(tc), tc); err != nil {
		t.Fatal(err)
	}
	generation := tc.Generation
	s.Eventually("the controller has seen the change while paused", time.Minute, func(ctx context.Context) (bool, error) {
		if err := s.C.Get(ctx, client.ObjectKeyFromObject(tc), tc); err != nil {
			return false, err
		}
		c := conditions.Get(tc.Status.Conditions, conditions.Paused)
		return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == generation, nil
	})
	if r, ok := s.runOf("pause", "apply", 2); ok {
		t.Fatalf("a suspended cluster started %s", r.Name)
	}
	s.mustCaptf("", "", []string{
		"Paused:   suspended by annotation cluster.x-k8s.io/paused, resume with `kubectl captf resume pause`",
		"Decision: start apply now (InputsChanged)",
	}, "why", "pause")

	s.mustCaptf(operator, "", []string{"Resumed TerraformCluster/pause: removed the annotation cluster.x-k8s.io/paused"}, "resume", "pause")
	s.awaitRun("pause", "apply", 2, 3*time.Minute, runsv1alpha1.RunPhaseSucceeded)
	s.mustCaptf(operator, "", []string{"is not suspended"}, "resume", "pause")
	s.failCaptf(operator, "", `no TerraformCluster, TerraformMachine or TerraformMachinePool named "nosuch"`, "suspend", "nosuch")
}

// TestVerbsReconcile: a pass requested by `reconcile` applies a changed ConfigMap source at once
// (the controller reads sources only once a minute on its own), and a request made while a
// backoff window is open says until when and does not skip it.
func TestVerbsReconcile(t *testing.T) {
	s := newSuite(t)
	settings := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "again-settings", Namespace: s.NS, Labels: map[string]string{"captf.io/variables": "true"}},
		Data:       map[string]string{"size": "small"},
	}
	if err := s.C.Create(s.Ctx, settings); err != nil {
		t.Fatal(err)
	}
	tc := s.Cluster("again", `{"name":"again"}`, func(c *infrav1.TerraformCluster) {
		c.Spec.VariablesFrom = []infrav1.VariablesSource{{ConfigMapRef: &infrav1.SourceReference{Name: settings.Name}}}
	})
	s.awaitRun("again", "apply", 1, 3*time.Minute, runsv1alpha1.RunPhaseSucceeded)
	operator := s.userWithRole("operator", app.RoleOperator)

	settings.Data["size"] = "large"
	if err := s.C.Update(s.Ctx, settings); err != nil {
		t.Fatal(err)
	}
	out := s.mustCaptf(operator, "", []string{"Requested a pass of TerraformCluster/again (captf.io/reconcile-requested-at="}, "reconcile", "again")
	requested := regexp.MustCompile(`reconcile-requested-at=([^)]+)\)`).FindStringSubmatch(out.stdout)
	if requested == nil {
		t.Fatalf("reconcile names no requested value:\n%s", out)
	}
	// The controller records the request it passed over: evidence of the pass itself, which the
	// apply below could also owe to the controller's next look at the sources.
	s.Eventually("the controller records the reconcile request as handled", 20*time.Second, func(ctx context.Context) (bool, error) {
		var got infrav1.TerraformCluster
		if err := s.C.Get(ctx, client.ObjectKeyFromObject(tc), &got); err != nil {
			return false, err
		}
		return got.Status.LastHandledReconcileAt == requested[1], nil
	})
	// Well within the minute after which the controller would read the source anyway.
	s.awaitRun("again", "apply", 2, 20*time.Second, runsv1alpha1.RunPhaseRunning, runsv1alpha1.RunPhaseSucceeded)
	s.awaitRun("again", "apply", 2, 3*time.Minute, runsv1alpha1.RunPhaseSucceeded)

	// A failing apply opens a one-minute window; fixed inputs wait for it, reconcile or not.
	s.PatchVariables(tc, `{"name":"again","fail":true}`)
	failed := s.awaitRun("again", "apply", 3, 3*time.Minute, runsv1alpha1.RunPhaseFailed)
	s.Eventually("the failed apply carries its backoff window", time.Minute, func(context.Context) (bool, error) {
		failed, _ = s.runOf("again", "apply", 3)
		return failed.Status.Backoff != nil, nil
	})
	retryAfter := failed.Status.Backoff.RetryAfter.Time
	s.PatchVariables(tc, `{"name":"again","fail":false}`)
	s.mustCaptf(operator, "", []string{
		"A backoff window of apply stays open until " + retryAfter.UTC().Format(time.RFC3339),
		"reconcile does not skip it; no apply starts before then",
	}, "reconcile", "again")
	next := s.awaitRun("again", "apply", 4, 3*time.Minute, runsv1alpha1.RunPhaseRunning, runsv1alpha1.RunPhaseSucceeded)
	if next.CreationTimestamp.Time.Before(retryAfter) {
		t.Fatalf("apply %s was created at %s, inside the backoff window that ends at %s", next.Name, next.CreationTimestamp, retryAfter)
	}
}

// TestVerbsReplanThenApproveAllFor: an operator asks for a fresh plan of a Manual cluster whose
// plan waits; the controller plans once for the request, and an approver approves the one
// waiting plan by its cluster's name. An Automatic cluster is refused.
func TestVerbsReplanThenApproveAllFor(t *testing.T) {
	s := newSuite(t)
	tc := s.Cluster("manual", `{"name":"manual"}`, func(c *infrav1.TerraformCluster) { c.Spec.ApplyPolicy = infrav1.ApplyPolicyManual })
	s.awaitRun("manual", "apply", 1, 3*time.Minute, runsv1alpha1.RunPhaseSucceeded)
	s.PatchVariables(tc, `{"name":"manual","size":"large"}`)
	s.awaitRun("manual", "plan", 1, 3*time.Minute, runsv1alpha1.RunPhaseSucceeded)
	s.Eventually("the plan waits in status", time.Minute, func(ctx context.Context) (bool, error) {
		err := s.C.Get(ctx, client.ObjectKeyFromObject(tc), tc)
		return err == nil && tc.Status.Plan != nil, err
	})
	operator := s.userWithRole("operator", app.RoleOperator)
	approver := s.Approver("alice")

	s.mustCaptf(operator, "", []string{"Requested a fresh plan of TerraformCluster/manual (captf.io/replan=", "It replaces the plan p3:"}, "replan", "manual")
	replanned := s.awaitRun("manual", "plan", 2, 3*time.Minute, runsv1alpha1.RunPhaseSucceeded)
	if err := s.C.Get(s.Ctx, client.ObjectKeyFromObject(tc), tc); err != nil {
		t.Fatal(err)
	}
	var job batchv1.Job
	if err := s.C.Get(s.Ctx, client.ObjectKey{Namespace: s.NS, Name: replanned.Name}, &job); err != nil {
		t.Fatal(err)
	}
	if request := tc.Annotations[jobs.AnnotationReplan]; request == "" || job.Annotations[jobs.AnnotationReplan] != request {
		t.Fatalf("plan Job %s records replan request %q, the object asks %q", job.Name, job.Annotations[jobs.AnnotationReplan], request)
	}
	// Planned once: the request is served, the new plan waits.
	s.Eventually("the replanned plan waits for approval", 2*time.Minute, func(context.Context) (bool, error) {
		r := s.captf("", "", "why", "manual")
		return r.err == nil && strings.Contains(r.stdout, "Decision: start nothing (PlanAwaitingApproval)"), nil
	})
	if r, ok := s.runOf("manual", "plan", 3); ok {
		t.Fatalf("one replan request planned twice: %s", r.Name)
	}

	s.mustCaptf(approver, "", []string{"Approved plan " + replanned.Name, "alice"}, "approve", "--all-for", "manual", "--yes")
	s.awaitRun("manual", "apply", 2, 3*time.Minute, runsv1alpha1.RunPhaseSucceeded)
	s.failCaptf(approver, "", `no plan of "manual" waits for approval`, "approve", "--all-for", "manual", "--yes")
	s.failCaptf(approver, "", "either PLAN or --all-for", "approve", replanned.Name, "--all-for", "manual")

	s.Cluster("auto", `{"name":"auto"}`)
	s.failCaptf(operator, "", "TerraformCluster/auto is not in Manual approval mode", "replan", "auto")
}

// TestVerbsUnlock: `unlock` shows who holds the state lock, refuses while the holder's pod runs,
// releases a stale lock of a finished pod after confirmation, and a workstation's lock when told
// to, by an update of the lock Lease, for a captf-state-unlocker; an operator cannot.
func TestVerbsUnlock(t *testing.T) {
	s := newSuite(t)
	s.Cluster("locked", `{"name":"locked"}`)
	applied := s.awaitRun("locked", "apply", 1, 3*time.Minute, runsv1alpha1.RunPhaseSucceeded)
	unlocker := s.userWithRole("unlocker", app.RoleStateUnlocker)
	operator := s.userWithRole("operator", app.RoleOperator)
	leaseKey := client.ObjectKey{Namespace: s.NS, Name: state.LockLeaseName(jobs.StateSecretSuffix(s.NS, jobs.KindCluster, "locked"))}
	lock := func(who string) {
		t.Helper()
		var lease coordinationv1.Lease
		if err := s.C.Get(s.Ctx, leaseKey, &lease); err != nil {
			t.Fatal(err)
		}
		info, _ := json.Marshal(map[string]string{"ID": "6c1e9d3a-0000-4000-8000-000000000001", "Operation": "OperationTypeApply", "Who": who, "Version": "1.10.10", "Created": "2026-11-30T14:00:00Z"})
		if lease.Annotations == nil {
			lease.Annotations = map[string]string{}
		}
		lease.Annotations[workspace.LockInfoAnnotation] = string(info)
		lease.Spec.HolderIdentity = ptr.To("6c1e9d3a-0000-4000-8000-000000000001")
		if err := s.C.Update(s.Ctx, &lease); err != nil {
			t.Fatal(err)
		}
	}
	s.mustCaptf(unlocker, "", []string{"The state of TerraformCluster/locked is not locked"}, "unlock", "locked")

	// A pod of the cluster's own Jobs that still runs holds the lock: never released.
	podName := applied.Name + "-q7x2k"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName, Namespace: s.NS},
		Spec:       corev1.PodSpec{NodeName: "no-such-node", Containers: []corev1.Container{{Name: "source", Image: "runner:1"}}},
	}
	if err := s.C.Create(s.Ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodRunning
	if err := s.C.Status().Update(s.Ctx, pod); err != nil {
		t.Fatal(err)
	}
	lock("root@" + podName)
	s.failCaptf(unlocker, "", "its holder's pod "+podName+" still runs (phase Running)", "unlock", "locked", "--yes")

	// Once that pod finished, the lock is stale: shown, declined, then released.
	pod.Status.Phase = corev1.PodFailed
	if err := s.C.Status().Update(s.Ctx, pod); err != nil {
		t.Fatal(err)
	}
	s.mustCaptf(unlocker, "n\n", []string{"Holder:    root@" + podName, "Pod:       " + podName + " is Failed", "Stale:     yes", "[y/N]", "Not released"}, "unlock", "locked")
	s.mustCaptf(unlocker, "y\n", []string{"Released the state lock 6c1e9d3a-0000-4000-8000-000000000001 of TerraformCluster/locked"}, "unlock", "locked")
	var lease coordinationv1.Lease
	if err := s.C.Get(s.Ctx, leaseKey, &lease); err != nil {
		t.Fatal(err)
	}
	if _, held := workspace.ReadStateLock(&lease); held || lease.Annotations[workspace.LockInfoAnnotation] != "" {
		t.Fatalf("the lock Lease still holds a lock: %+v %v", lease.Spec, lease.Annotations)
	}

	// A workstation's lock is not known stale: released only when the unlocker says so. An
	// operator, who may suspend and annotate, may not break it.
	lock("alice@laptop")
	s.failCaptf(operator, "", "ClusterRole captf-state-unlocker grants it", "unlock", "locked", "--yes")
	s.mustCaptf(unlocker, "", []string{"Holder:    alice@laptop", `Stale:     unknown: lock 6c1e9d3a-0000-4000-8000-000000000001 held by "alice@laptop"`, "Released the state lock"}, "unlock", "locked", "--yes")
}

// TestVerbsHistory: a viewer reads a cluster's runs as a timeline per operation, oldest first,
// with the backoff window of the failure, as text, JSON and YAML.
func TestVerbsHistory(t *testing.T) {
	s := newSuite(t)
	tc := s.Cluster("hist", `{"name":"hist"}`)
	s.awaitRun("hist", "apply", 1, 3*time.Minute, runsv1alpha1.RunPhaseSucceeded)
	s.PatchVariables(tc, `{"name":"hist","fail":true}`)
	s.awaitRun("hist", "apply", 2, 3*time.Minute, runsv1alpha1.RunPhaseFailed)
	viewer := s.userWithRole("viewer", app.RoleRunsView)

	var text result
	s.Eventually("history shows the failure's window", time.Minute, func(context.Context) (bool, error) {
		text = s.captf(viewer, "", "history", "hist")
		return text.err == nil && strings.Contains(text.stdout, "open until"), nil
	})
	t.Logf("$ kubectl captf history hist\n%s", text.stdout)
	timeline := regexp.MustCompile(`(?s)TerraformCluster/hist\n  apply\n    ATTEMPT.*\n    1 .*Succeeded.*\n    2 .*Failed .*1m0s, open until .*step/\w+`)
	if !timeline.MatchString(text.stdout) {
		t.Fatalf("history is not the apply timeline, oldest first:\n%s", text.stdout)
	}

	asJSON := s.mustCaptf(viewer, "", []string{`"operations"`}, "history", "hist", "-o", "json")
	var h app.History
	if err := json.Unmarshal([]byte(asJSON.stdout), &h); err != nil {
		t.Fatalf("history -o json: %v\n%s", err, asJSON.stdout)
	}
	if len(h.Operations) != 1 || h.Operations[0].Operation != "apply" || len(h.Operations[0].Runs) != 2 ||
		h.Operations[0].Runs[0].Attempt != 1 || h.Operations[0].Runs[1].Backoff == nil {
		t.Fatalf("history -o json: %+v", h)
	}
	s.mustCaptf(viewer, "", []string{"operations:", "operation: apply", "retryAfter:"}, "history", "hist", "-o", "yaml")
	s.failCaptf(viewer, "", `unsupported output format "wide"`, "history", "hist", "-o", "wide")
}

// Package e2e drives the whole of captf on a local control plane: real Jobs whose pods the node
// agent runs as local processes, the real runner and OpenTofu, the real controller and
// aggregated API server binaries under their shipped RBAC, and the real kubectl through the
// aggregator.
package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	runsv1alpha1 "github.com/captf/captf/apis/runs/v1alpha1"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/test/system"
)

// sys is the system every test of this binary drives.
var sys *system.System

func TestMain(m *testing.M) {
	os.Exit(system.Main(m, system.Options{}))
}

// suite is one test's view of the system: an admin client and its own namespace.
type suite struct {
	t   *testing.T
	ctx context.Context
	c   client.Client
	ns  string
}

func newSuite(t *testing.T) *suite {
	t.Helper()
	sys = system.Get(t)
	c, ns := sys.NewNamespace(t, "e2e")
	return &suite{t: t, ctx: context.Background(), c: c, ns: ns}
}

func (s *suite) cluster(name string, variables string, mutate ...func(*infrav1.TerraformCluster)) *infrav1.TerraformCluster {
	s.t.Helper()
	tc := &infrav1.TerraformCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns},
		Spec: infrav1.TerraformClusterSpec{
			WorkspaceSpec: infrav1.WorkspaceSpec{
				Source:    infrav1.SourceSpec{Image: system.SampleNoopImage},
				Variables: &apiextensionsv1.JSON{Raw: []byte(variables)},
			},
			Drift: infrav1.DriftSpec{IntervalSeconds: ptr.To[int64](0)},
		},
	}
	for _, m := range mutate {
		m(tc)
	}
	if err := s.c.Create(s.ctx, tc); err != nil {
		s.t.Fatal(err)
	}
	return tc
}

func (s *suite) eventually(what string, timeout time.Duration, cond func(ctx context.Context) (bool, error)) {
	s.t.Helper()
	if err := wait.PollUntilContextTimeout(s.ctx, 250*time.Millisecond, timeout, true, cond); err != nil {
		s.t.Fatalf("%s: %v\ncontroller log:\n%s", what, err, sys.Log("controller"))
	}
}

// kubectl runs the real kubectl as admin, or with another kubeconfig.
func (s *suite) kubectl(kubeconfig string, args ...string) (string, error) {
	if kubeconfig == "" {
		kubeconfig = sys.Env.Kubeconfig
	}
	cmd := exec.CommandContext(s.ctx, sys.Env.BinDir+"/kubectl", append([]string{"--kubeconfig=" + kubeconfig, "-n", s.ns}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("kubectl %v: %w: %s", args, err, stderr.String())
	}
	return stdout.String(), nil
}

// runs lists the runs of a target through the aggregator with the real kubectl.
func (s *suite) runs(target string) []runsv1alpha1.Run {
	s.t.Helper()
	out, err := s.kubectl("", "get", "runs", "--field-selector=spec.target.name="+target, "-o", "json")
	if err != nil {
		s.t.Fatal(err)
	}
	var list runsv1alpha1.RunList
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		s.t.Fatalf("decoding runs: %v\n%s", err, out)
	}
	return list.Items
}

// waitRun waits until a run of target with op reaches one of phases, and returns it.
func (s *suite) waitRun(target string, op jobs.Op, attempt int32, phases ...runsv1alpha1.RunPhase) runsv1alpha1.Run {
	s.t.Helper()
	return s.waitRunResult(target, op, attempt, false, phases...)
}

// waitRunResult is waitRun that, withResult, also waits for the change counts or error the
// controller records when it books the finished Job.
func (s *suite) waitRunResult(target string, op jobs.Op, attempt int32, withResult bool, phases ...runsv1alpha1.RunPhase) runsv1alpha1.Run {
	s.t.Helper()
	var found runsv1alpha1.Run
	s.eventually(fmt.Sprintf("%s run %d of %s reaches %v", op, attempt, target, phases), 3*time.Minute, func(context.Context) (bool, error) {
		for _, r := range s.runs(target) {
			if r.Spec.Operation == string(op) && r.Spec.Attempt == attempt {
				for _, p := range phases {
					if r.Status.Phase == p && (!withResult || r.Status.Changes != nil || r.Status.Error != nil) {
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

func (s *suite) patchVariables(obj client.Object, variables string) {
	s.t.Helper()
	patch := fmt.Sprintf(`{"spec":{"variables":%s}}`, variables)
	if err := s.c.Patch(s.ctx, obj, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
		s.t.Fatal(err)
	}
}

// approve POSTs a PlanApproval for plan with hash as the given kubeconfig's user.
func (s *suite) approve(kubeconfig, plan, hash string) (string, error) {
	body := fmt.Sprintf(`{"apiVersion":"runs.captf.io/v1alpha1","kind":"PlanApproval","metadata":{"name":%q},"spec":{"planHash":%q}}`, plan, hash)
	file := s.t.TempDir() + "/approval.json"
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		s.t.Fatal(err)
	}
	return s.kubectl(kubeconfig, "create", "--raw", fmt.Sprintf("/apis/runs.captf.io/v1alpha1/namespaces/%s/plans/%s/approval", s.ns, plan), "-f", file)
}

// approver is a user who may only read plans and approve them in the suite's namespace.
func (s *suite) approver(name string) string {
	s.t.Helper()
	_, kubeconfig, err := sys.Env.AddUser(name)
	if err != nil {
		s.t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "captf-plan-approver"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}},
	}
	if err := s.c.Create(s.ctx, binding); err != nil {
		s.t.Fatal(err)
	}
	return kubeconfig
}

func TestProvisionShowsASucceededFirstAttempt(t *testing.T) {
	s := newSuite(t)
	tc := s.cluster("web", `{"name":"web"}`)
	run := s.waitRunResult("web", jobs.OpApply, 1, true, runsv1alpha1.RunPhaseSucceeded, runsv1alpha1.RunPhaseFailed)
	if run.Status.Phase != runsv1alpha1.RunPhaseSucceeded || run.Status.RetryNumber != 1 || run.Status.Changes == nil || run.Status.Changes.Add != 1 {
		t.Fatalf("run = %+v", run.Status)
	}
	s.eventually("the cluster is provisioned", time.Minute, func(ctx context.Context) (bool, error) {
		err := s.c.Get(ctx, client.ObjectKeyFromObject(tc), tc)
		return err == nil && tc.Status.Initialization != nil && ptr.Deref(tc.Status.Initialization.Provisioned, false), err
	})
	out, err := s.kubectl("", "get", "runs")
	if err != nil || !strings.Contains(out, "TerraformCluster/web") || !strings.Contains(out, "Succeeded") {
		t.Fatalf("kubectl get runs:\n%s\n%v", out, err)
	}
}

func TestAFailingModuleShowsItsBackoffWindow(t *testing.T) {
	s := newSuite(t)
	s.cluster("broken", `{"name":"broken","fail":true}`)
	run := s.waitRunResult("broken", jobs.OpApply, 1, true, runsv1alpha1.RunPhaseFailed, runsv1alpha1.RunPhaseSucceeded)
	if run.Status.Phase != runsv1alpha1.RunPhaseFailed || run.Status.Error == nil || !strings.Contains(run.Status.Error.Summary, "precondition") {
		t.Fatalf("run = %+v", run.Status)
	}
	b := run.Status.Backoff
	if b == nil || b.Failures != 1 || b.Delay.Duration != time.Minute || !run.Status.CountsTowardBackoff {
		t.Fatalf("backoff = %+v, want one failure and a one-minute delay", b)
	}
	if want := run.Status.CompletionTime.Add(time.Minute); !b.RetryAfter.Time.Equal(want) {
		t.Fatalf("retryAfter = %v, want the finish plus one minute (%v)", b.RetryAfter, want)
	}
	out, err := s.kubectl("", "get", "runs", "--field-selector=spec.target.name=broken")
	if err != nil || !strings.Contains(out, "Failed") {
		t.Fatalf("kubectl get runs:\n%s\n%v", out, err)
	}
}

func TestManualClusterAppliesAPlanApprovedByAnApprover(t *testing.T) {
	s := newSuite(t)
	tc := s.cluster("manual", `{"name":"manual"}`, func(c *infrav1.TerraformCluster) { c.Spec.ApplyPolicy = infrav1.ApplyPolicyManual })
	s.waitRun("manual", jobs.OpApply, 1, runsv1alpha1.RunPhaseSucceeded)
	s.patchVariables(tc, `{"name":"manual","size":"large"}`)
	planRun := s.waitRun("manual", jobs.OpPlan, 1, runsv1alpha1.RunPhaseSucceeded)

	var plan runsv1alpha1.Plan
	s.eventually("the plan awaits approval", time.Minute, func(context.Context) (bool, error) {
		out, err := s.kubectl("", "get", "plans", planRun.Name, "-o", "json")
		if err != nil {
			return false, nil
		}
		if err := json.Unmarshal([]byte(out), &plan); err != nil {
			return false, err
		}
		return plan.Status.Phase == runsv1alpha1.PlanPhaseAwaitingApproval, nil
	})
	if plan.Status.PlanHash == "" || plan.Status.Change != 1 {
		t.Fatalf("plan = %+v", plan.Status)
	}
	approver := s.approver("alice")
	if _, err := s.kubectl(approver, "patch", "terraformcluster", "manual", "--type=merge", "-p", `{"metadata":{"annotations":{"x":"y"}}}`); err == nil {
		t.Fatal("the approver could patch the TerraformCluster")
	}
	if out, err := s.approve(approver, plan.Name, "p2:"+strings.Repeat("0", 64)); err == nil || !strings.Contains(err.Error(), "409") && !strings.Contains(err.Error(), "Conflict") {
		t.Fatalf("approving a wrong hash: %s %v", out, err)
	}
	if out, err := s.approve(approver, plan.Name, plan.Status.PlanHash); err != nil {
		t.Fatalf("approving: %s %v", out, err)
	}
	apply := s.waitRun("manual", jobs.OpApply, 2, runsv1alpha1.RunPhaseSucceeded, runsv1alpha1.RunPhaseFailed, runsv1alpha1.RunPhasePlanChanged)
	if apply.Status.Phase != runsv1alpha1.RunPhaseSucceeded || apply.Spec.ApprovedPlan != plan.Status.PlanHash {
		t.Fatalf("the approved apply = %+v %+v", apply.Spec, apply.Status)
	}
}

func TestDestructiveChangeIsBlockedThenApproved(t *testing.T) {
	s := newSuite(t)
	tc := s.cluster("guarded", `{"name":"guarded"}`)
	s.waitRun("guarded", jobs.OpApply, 1, runsv1alpha1.RunPhaseSucceeded)
	s.patchVariables(tc, `{"name":"guarded","generation":2}`)
	// Until the controller books the Job, its run shows Failed; booked, it shows Blocked.
	blocked := s.waitRun("guarded", jobs.OpApply, 2, runsv1alpha1.RunPhaseBlocked)
	var plan runsv1alpha1.Plan
	out, err := s.kubectl("", "get", "plans", blocked.Name, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatal(err)
	}
	if plan.Status.Phase != runsv1alpha1.PlanPhaseAwaitingApproval || plan.Status.ApprovalHash == "" {
		t.Fatalf("the blocked apply's plan = %+v", plan.Status)
	}
	if out, err := s.approve(s.approver("bob"), plan.Name, plan.Status.ApprovalHash); err != nil {
		t.Fatalf("approving: %s %v", out, err)
	}
	applied := s.waitRunResult("guarded", jobs.OpApply, 3, true, runsv1alpha1.RunPhaseSucceeded, runsv1alpha1.RunPhaseFailed, runsv1alpha1.RunPhaseBlocked)
	if applied.Status.Phase != runsv1alpha1.RunPhaseSucceeded || applied.Status.Changes == nil || applied.Status.Changes.Destroy != 1 {
		t.Fatalf("the approved apply = %+v", applied.Status)
	}
}

func TestDriftInStateIsReportedAndRemediated(t *testing.T) {
	s := newSuite(t)
	tc := s.cluster("drifty", `{"name":"drifty"}`, func(c *infrav1.TerraformCluster) {
		c.Spec.Drift = infrav1.DriftSpec{IntervalSeconds: ptr.To[int64](3), Action: infrav1.DriftActionRemediate}
	})
	s.waitRun("drifty", jobs.OpApply, 1, runsv1alpha1.RunPhaseSucceeded)
	s.waitRun("drifty", jobs.OpDrift, 1, runsv1alpha1.RunPhaseSucceeded)

	// Edit the state behind OpenTofu's back: the recorded input no longer matches the module.
	key := client.ObjectKey{Namespace: s.ns, Name: state.SecretName(jobs.StateSecretSuffix(s.ns, jobs.KindCluster, tc.Name))}
	s.eventually("the state is edited", time.Minute, func(ctx context.Context) (bool, error) {
		var secret corev1.Secret
		if err := s.c.Get(ctx, key, &secret); err != nil {
			return false, err
		}
		edited, err := editInput(secret.Data["tfstate"])
		if err != nil {
			return false, err
		}
		secret.Data["tfstate"] = edited
		err = s.c.Update(ctx, &secret)
		return err == nil, client.IgnoreNotFound(ignoreConflict(err))
	})

	var remediation *runsv1alpha1.Run
	s.eventually("a drift run reports the drift and a remediation applies", 3*time.Minute, func(context.Context) (bool, error) {
		detected := false
		for _, r := range s.runs("drifty") {
			if r.Spec.Operation == "drift" && r.Status.Drift != nil && r.Status.Drift.Detected && r.Status.Drift.Change == 1 {
				detected = true
			}
			if r.Spec.DriftRemediation && r.Status.Phase == runsv1alpha1.RunPhaseSucceeded {
				remediation = &r
			}
		}
		return detected && remediation != nil, nil
	})
}

func TestDeleteDestroysAndLeavesNothingBehind(t *testing.T) {
	s := newSuite(t)
	tc := s.cluster("gone", `{"name":"gone"}`)
	s.waitRun("gone", jobs.OpApply, 1, runsv1alpha1.RunPhaseSucceeded)
	if err := s.c.Delete(s.ctx, tc); err != nil {
		t.Fatal(err)
	}
	// The destroy's run vanishes with the object's Jobs once cleanup is done; its event stays.
	s.eventually("the object, its Jobs, Secrets and Leases are gone", 3*time.Minute, func(ctx context.Context) (bool, error) {
		if err := s.c.Get(ctx, client.ObjectKeyFromObject(tc), tc); !apierrors.IsNotFound(err) {
			return false, nil
		}
		var jobList batchv1.JobList
		var secrets corev1.SecretList
		var leases coordinationv1.LeaseList
		for _, l := range []client.ObjectList{&jobList, &secrets, &leases} {
			if err := s.c.List(ctx, l, client.InNamespace(s.ns)); err != nil {
				return false, err
			}
		}
		return len(jobList.Items) == 0 && len(secrets.Items) == 0 && len(leases.Items) == 0, nil
	})
	var evs eventsv1.EventList
	if err := s.c.List(s.ctx, &evs, client.InNamespace(s.ns)); err != nil {
		t.Fatal(err)
	}
	destroyed := false
	for _, e := range evs.Items {
		destroyed = destroyed || e.Reason == "JobSucceeded" && strings.Contains(e.Note, "-destroy-a1-")
	}
	if !destroyed {
		t.Fatal("no destroy Job succeeded before the object went away")
	}
}

func TestControllerKilledMidRunStartsNoDuplicateJob(t *testing.T) {
	s := newSuite(t)
	tc := s.cluster("crash", `{"name":"crash"}`)
	s.waitRun("crash", jobs.OpApply, 1, runsv1alpha1.RunPhaseSucceeded)
	s.patchVariables(tc, `{"name":"crash","size":"large"}`)
	s.eventually("the second apply starts", time.Minute, func(context.Context) (bool, error) {
		for _, r := range s.runs("crash") {
			if r.Spec.Attempt == 2 {
				return true, nil
			}
		}
		return false, nil
	})
	if err := sys.StopProcess("controller"); err != nil {
		t.Fatal(err)
	}
	if err := sys.StartController(s.ctx); err != nil {
		t.Fatal(err)
	}
	s.waitRun("crash", jobs.OpApply, 2, runsv1alpha1.RunPhaseSucceeded)
	var list batchv1.JobList
	if err := s.c.List(s.ctx, &list, client.InNamespace(s.ns), client.MatchingLabels(jobs.OwnerLabels(jobs.KindCluster, "crash"))); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 2 {
		t.Fatalf("%d Jobs after the restart, want the first apply and the one that ran across it", len(list.Items))
	}
}

// editInput changes the recorded input of terraform_data.network in a gzip state.
func editInput(raw []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	for _, r := range doc["resources"].([]any) {
		res := r.(map[string]any)
		if res["type"] == "terraform_data" && res["name"] == "network" {
			attrs := res["instances"].([]any)[0].(map[string]any)["attributes"].(map[string]any)
			attrs["input"].(map[string]any)["value"].(map[string]any)["size"] = "edited"
		}
	}
	doc["serial"] = doc["serial"].(float64) + 1
	data, err = json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	return state.Compress(data)
}

func ignoreConflict(err error) error {
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
}

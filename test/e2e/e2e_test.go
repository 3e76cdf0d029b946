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
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	runsv1alpha1 "github.com/captf/captf/apis/runs/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/test/system"
)

// sys is the system every test of this binary drives.
var sys *system.System

func TestMain(m *testing.M) {
	os.Exit(system.Main(m, system.Options{Deployments: true}))
}

// suite is one test's view of the system: an admin client and its own namespace.
type suite struct {
	*system.Suite
}

func newSuite(t *testing.T) *suite {
	t.Helper()
	s := &suite{system.NewSuite(t, "e2e")}
	sys = s.Sys
	return s
}

// kubectl runs the real kubectl as admin, or with another kubeconfig.
func (s *suite) kubectl(kubeconfig string, args ...string) (string, error) {
	if kubeconfig == "" {
		kubeconfig = sys.Env.Kubeconfig
	}
	cmd := exec.CommandContext(s.Ctx, sys.Env.BinDir+"/kubectl", append([]string{"--kubeconfig=" + kubeconfig, "-n", s.NS}, args...)...)
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
	s.T.Helper()
	out, err := s.kubectl("", "get", "runs", "--field-selector=spec.target.name="+target, "-o", "json")
	if err != nil {
		s.T.Fatal(err)
	}
	var list runsv1alpha1.RunList
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		s.T.Fatalf("decoding runs: %v\n%s", err, out)
	}
	return list.Items
}

// waitRun waits until a run of target with op reaches one of phases, and returns it.
func (s *suite) waitRun(target string, op jobs.Op, attempt int32, phases ...runsv1alpha1.RunPhase) runsv1alpha1.Run {
	s.T.Helper()
	return s.waitRunResult(target, op, attempt, false, phases...)
}

// waitRunResult is waitRun that, withResult, also waits for the change counts or error the
// controller records when it books the finished Job.
func (s *suite) waitRunResult(target string, op jobs.Op, attempt int32, withResult bool, phases ...runsv1alpha1.RunPhase) runsv1alpha1.Run {
	s.T.Helper()
	var found runsv1alpha1.Run
	var seen runsv1alpha1.RunPhase
	s.Eventually(fmt.Sprintf("%s run %d of %s reaches %v", op, attempt, target, phases), 3*time.Minute, func(context.Context) (bool, error) {
		for _, r := range s.runs(target) {
			if r.Spec.Operation == string(op) && r.Spec.Attempt == attempt {
				if r.Status.Phase != seen {
					// Said only when the test fails: the way a run went before it missed.
					s.T.Logf("%s run %d of %s is %s", op, attempt, target, r.Status.Phase)
					seen = r.Status.Phase
				}
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

// approve POSTs a PlanApproval for plan with hash as the given kubeconfig's user.
func (s *suite) approve(kubeconfig, plan, hash string) (string, error) {
	body := fmt.Sprintf(`{"apiVersion":"runs.captf.io/v1alpha1","kind":"PlanApproval","metadata":{"name":%q},"spec":{"planHash":%q}}`, plan, hash)
	file := s.T.TempDir() + "/approval.json"
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		s.T.Fatal(err)
	}
	return s.kubectl(kubeconfig, "create", "--raw", fmt.Sprintf("/apis/runs.captf.io/v1alpha1/namespaces/%s/plans/%s/approval", s.NS, plan), "-f", file)
}

func TestProvisionShowsASucceededFirstAttempt(t *testing.T) {
	s := newSuite(t)
	tc := s.Cluster("web", `{"name":"web"}`)
	run := s.waitRunResult("web", jobs.OpApply, 1, true, runsv1alpha1.RunPhaseSucceeded, runsv1alpha1.RunPhaseFailed)
	if run.Status.Phase != runsv1alpha1.RunPhaseSucceeded || run.Status.RetryNumber != 1 || run.Status.Changes == nil || run.Status.Changes.Add != 1 {
		t.Fatalf("run = %+v", run.Status)
	}
	s.Eventually("the cluster is provisioned", time.Minute, func(ctx context.Context) (bool, error) {
		err := s.C.Get(ctx, client.ObjectKeyFromObject(tc), tc)
		return err == nil && tc.Status.Initialization != nil && ptr.Deref(tc.Status.Initialization.Provisioned, false), err
	})
	// The sample module's outputs reached the contract fields.
	if tc.Spec.ControlPlaneEndpoint != (infrav1.APIEndpoint{Host: "web.local", Port: 6443}) || len(tc.Status.FailureDomains) != 1 ||
		!conditions.IsTrue(tc.Status.Conditions, conditions.OutputsValid) {
		t.Fatalf("endpoint %+v, failure domains %+v, conditions %+v", tc.Spec.ControlPlaneEndpoint, tc.Status.FailureDomains, tc.Status.Conditions)
	}
	out, err := s.kubectl("", "get", "runs")
	if err != nil || !strings.Contains(out, "TerraformCluster/web") || !strings.Contains(out, "Succeeded") {
		t.Fatalf("kubectl get runs:\n%s\n%v", out, err)
	}
}

func TestAMachineAndAPoolReceiveTheirOutputs(t *testing.T) {
	s := newSuite(t)
	spec := func(name string) infrav1.WorkspaceSpec {
		return infrav1.WorkspaceSpec{
			Source:    infrav1.SourceSpec{Image: system.SampleNoopImage},
			Variables: &apiextensionsv1.JSON{Raw: []byte(fmt.Sprintf(`{"name":%q}`, name))},
		}
	}
	tm := &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: "m1", Namespace: s.NS}, Spec: infrav1.TerraformMachineSpec{WorkspaceSpec: spec("m1")}}
	tmp := &infrav1.TerraformMachinePool{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: s.NS}, Spec: infrav1.TerraformMachinePoolSpec{WorkspaceSpec: spec("p1")}}
	for _, obj := range []client.Object{tm, tmp} {
		s.Create(obj)
	}
	s.Eventually("the machine has its provider ID and addresses", 2*time.Minute, func(ctx context.Context) (bool, error) {
		err := s.C.Get(ctx, client.ObjectKeyFromObject(tm), tm)
		return err == nil && tm.Spec.ProviderID == "local://m1" && len(tm.Status.Addresses) == 1 &&
			tm.Status.Initialization != nil && ptr.Deref(tm.Status.Initialization.Provisioned, false), err
	})
	s.Eventually("the pool has its provider IDs and replicas", 2*time.Minute, func(ctx context.Context) (bool, error) {
		err := s.C.Get(ctx, client.ObjectKeyFromObject(tmp), tmp)
		return err == nil && len(tmp.Spec.ProviderIDList) == 1 && tmp.Spec.ProviderIDList[0] == "local://p1-0" &&
			tmp.Status.Replicas != nil && *tmp.Status.Replicas == 1, err
	})
	out, err := s.kubectl("", "get", "terraformmachines")
	if err != nil || !strings.Contains(out, "local://m1") {
		t.Fatalf("kubectl get terraformmachines shows no provider ID:\n%s\n%v", out, err)
	}
}

func TestAFailingModuleShowsItsBackoffWindow(t *testing.T) {
	s := newSuite(t)
	s.Cluster("broken", `{"name":"broken","fail":true}`)
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
	tc := s.Cluster("manual", `{"name":"manual"}`, func(c *infrav1.TerraformCluster) { c.Spec.ApplyPolicy = infrav1.ApplyPolicyManual })
	s.waitRun("manual", jobs.OpApply, 1, runsv1alpha1.RunPhaseSucceeded)
	s.PatchVariables(tc, `{"name":"manual","size":"large"}`)
	planRun := s.waitRun("manual", jobs.OpPlan, 1, runsv1alpha1.RunPhaseSucceeded)

	var plan runsv1alpha1.Plan
	s.Eventually("the plan awaits approval", time.Minute, func(context.Context) (bool, error) {
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
	approver := s.Approver("alice")
	if _, err := s.kubectl(approver, "patch", "terraformcluster", "manual", "--type=merge", "-p", `{"metadata":{"annotations":{"x":"y"}}}`); err == nil {
		t.Fatal("the approver could patch the TerraformCluster")
	}
	if out, err := s.approve(approver, plan.Name, "p3:"+strings.Repeat("0", 64)); err == nil || !strings.Contains(err.Error(), "409") && !strings.Contains(err.Error(), "Conflict") {
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
	tc := s.Cluster("guarded", `{"name":"guarded"}`)
	s.waitRun("guarded", jobs.OpApply, 1, runsv1alpha1.RunPhaseSucceeded)
	s.PatchVariables(tc, `{"name":"guarded","generation":2}`)
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
	if out, err := s.approve(s.Approver("bob"), plan.Name, plan.Status.ApprovalHash); err != nil {
		t.Fatalf("approving: %s %v", out, err)
	}
	applied := s.waitRunResult("guarded", jobs.OpApply, 3, true, runsv1alpha1.RunPhaseSucceeded, runsv1alpha1.RunPhaseFailed, runsv1alpha1.RunPhaseBlocked)
	if applied.Status.Phase != runsv1alpha1.RunPhaseSucceeded || applied.Status.Changes == nil || applied.Status.Changes.Destroy != 1 {
		t.Fatalf("the approved apply = %+v", applied.Status)
	}
}

func TestDriftInStateIsReportedAndRemediated(t *testing.T) {
	s := newSuite(t)
	tc := s.Cluster("drifty", `{"name":"drifty"}`, func(c *infrav1.TerraformCluster) {
		c.Spec.Drift = infrav1.DriftSpec{IntervalSeconds: ptr.To[int64](3), Action: infrav1.DriftActionRemediate}
	})
	s.waitRun("drifty", jobs.OpApply, 1, runsv1alpha1.RunPhaseSucceeded)
	s.waitRun("drifty", jobs.OpDrift, 1, runsv1alpha1.RunPhaseSucceeded)

	// Edit the state behind OpenTofu's back: the recorded input no longer matches the module.
	key := client.ObjectKey{Namespace: s.NS, Name: state.SecretName(jobs.StateSecretSuffix(s.NS, jobs.KindCluster, tc.Name))}
	s.Eventually("the state is edited", time.Minute, func(ctx context.Context) (bool, error) {
		var secret corev1.Secret
		if err := s.C.Get(ctx, key, &secret); err != nil {
			return false, err
		}
		edited, err := editInput(secret.Data["tfstate"])
		if err != nil {
			return false, err
		}
		secret.Data["tfstate"] = edited
		err = s.C.Update(ctx, &secret)
		return err == nil, client.IgnoreNotFound(ignoreConflict(err))
	})

	var remediation *runsv1alpha1.Run
	s.Eventually("a drift run reports the drift and a remediation applies", 3*time.Minute, func(context.Context) (bool, error) {
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
	tc := s.Cluster("gone", `{"name":"gone"}`)
	s.waitRun("gone", jobs.OpApply, 1, runsv1alpha1.RunPhaseSucceeded)
	if err := s.C.Delete(s.Ctx, tc); err != nil {
		t.Fatal(err)
	}
	// The destroy's run vanishes with the object's Jobs once cleanup is done; its event stays.
	s.Eventually("the object, its Jobs, Secrets and Leases are gone", 3*time.Minute, func(ctx context.Context) (bool, error) {
		if err := s.C.Get(ctx, client.ObjectKeyFromObject(tc), tc); !apierrors.IsNotFound(err) {
			return false, nil
		}
		var jobList batchv1.JobList
		var secrets corev1.SecretList
		var leases coordinationv1.LeaseList
		for _, l := range []client.ObjectList{&jobList, &secrets, &leases} {
			if err := s.C.List(ctx, l, client.InNamespace(s.NS)); err != nil {
				return false, err
			}
		}
		return len(jobList.Items) == 0 && len(secrets.Items) == 0 && len(leases.Items) == 0, nil
	})
	var evs eventsv1.EventList
	if err := s.C.List(s.Ctx, &evs, client.InNamespace(s.NS)); err != nil {
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
	tc := s.Cluster("crash", `{"name":"crash"}`)
	s.waitRun("crash", jobs.OpApply, 1, runsv1alpha1.RunPhaseSucceeded)
	s.PatchVariables(tc, `{"name":"crash","size":"large"}`)
	s.Eventually("the second apply starts", time.Minute, func(context.Context) (bool, error) {
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
	if err := sys.StartController(s.Ctx); err != nil {
		t.Fatal(err)
	}
	s.waitRun("crash", jobs.OpApply, 2, runsv1alpha1.RunPhaseSucceeded)
	var list batchv1.JobList
	if err := s.C.List(s.Ctx, &list, client.InNamespace(s.NS), client.MatchingLabels(jobs.OwnerLabels(jobs.KindCluster, "crash"))); err != nil {
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

package workspace_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
)

const (
	planA = "p3:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	planB = "p3:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

func command(j batchv1.Job) []string { return j.Spec.Template.Spec.Containers[0].Command }

func hasArg(j batchv1.Job, arg string) bool { return slices.Contains(command(j), arg) }

func mountsPlanKey(j batchv1.Job) bool {
	for _, v := range j.Spec.Template.Spec.Volumes {
		if v.Name == "plan-key" {
			return true
		}
	}
	return false
}

// provisioned creates an object of the harness's kind, applies it once and converges it.
func (h *harness) provisioned(mutate func(*infrav1.TerraformCluster)) *infrav1.TerraformCluster {
	h.t.Helper()
	var mutations []func(*infrav1.TerraformCluster)
	if mutate != nil {
		mutations = append(mutations, mutate)
	}
	tc := h.cluster("web", mutations...)
	h.settle(tc)
	h.writeState(jobs.KindCluster, "web", 1)
	h.finish(h.runningJob(jobs.KindCluster, "web"), jobs.OutcomeSucceeded, nil)
	h.settle(tc)
	h.get(tc)
	return tc
}

func (h *harness) setVariables(tc *infrav1.TerraformCluster, variables string) {
	h.t.Helper()
	h.get(tc)
	tc.Spec.Variables.Raw = []byte(variables)
	if err := h.c.Update(h.ctx, tc); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) annotate(obj client.Object, key, value string) {
	h.t.Helper()
	h.get(obj)
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[key] = value
	obj.SetAnnotations(a)
	if err := h.c.Update(h.ctx, obj); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) noRunningJob(kind jobs.Kind, name string) {
	h.t.Helper()
	for _, j := range h.jobs(kind, name) {
		if !jobs.OutcomeOf(&j).Finished() {
			h.t.Fatalf("Job %s runs, want none", j.Name)
		}
	}
}

func TestManualCyclePlanApproveApply(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.provisioned(func(c *infrav1.TerraformCluster) { c.Spec.ApplyPolicy = infrav1.ApplyPolicyManual })
	h.setVariables(tc, `{"region":"us"}`)
	h.settle(tc)

	plan := h.runningJob(jobs.KindCluster, "web")
	if jobs.OpOf(&plan) != jobs.OpPlan || !mountsPlanKey(plan) {
		t.Fatalf("Job %s op %s, plan key mounted %v; want a plan with the key", plan.Name, jobs.OpOf(&plan), mountsPlanKey(plan))
	}
	key := h.secret(jobs.PlanKeySecretName(jobs.KindCluster, "web"))
	if key == nil || len(key.Data["key"]) != 32 || key.OwnerReferences[0].UID != tc.UID {
		t.Fatalf("plan key Secret = %+v", key)
	}
	h.finish(plan, jobs.OutcomeSucceeded, &jobs.RunnerResult{Plan: &jobs.RunnerPlan{Hash: planA, Counts: jobs.Counts{Change: 1},
		Resources: []jobs.ResourceChange{{Address: "module.workspace.terraform_data.a", Actions: []string{"update"}}}}})
	h.settle(tc)

	h.get(tc)
	if tc.Status.Plan == nil || tc.Status.Plan.PlanHash != planA || tc.Status.Plan.Job != plan.Name || tc.Status.Plan.Change != 1 {
		t.Fatalf("status.plan = %+v", tc.Status.Plan)
	}
	c := conditions.Get(tc.Status.Conditions, conditions.ApplyJobSucceeded)
	if c.Status != metav1.ConditionUnknown || c.Reason != conditions.ReasonPlanAwaitingApproval || !strings.Contains(c.Message, planA) || !strings.Contains(c.Message, "plans/"+plan.Name+"/approval") {
		t.Fatalf("ApplyJobSucceeded = %+v", c)
	}
	if ev := h.events(); countPrefix(ev, "Normal PlanReady") != 1 {
		t.Errorf("events = %v", ev)
	}
	h.noRunningJob(jobs.KindCluster, "web")

	// A stale approval never applies.
	h.annotate(tc, jobs.AnnotationApprovePlan, planB)
	h.settle(tc)
	h.noRunningJob(jobs.KindCluster, "web")

	h.annotate(tc, jobs.AnnotationApprovePlan, planA)
	h.settle(tc)
	apply := h.runningJob(jobs.KindCluster, "web")
	if jobs.OpOf(&apply) != jobs.OpApply || !hasArg(apply, "--expect-plan="+planA) || apply.Annotations[jobs.AnnotationApprovedPlan] != planA || !mountsPlanKey(apply) {
		t.Fatalf("apply Job %s: %v %v", apply.Name, command(apply), apply.Annotations)
	}
	if hasArg(apply, "--guard-deletes") {
		t.Error("an approved plan is guarded again")
	}
	h.finish(apply, jobs.OutcomeSucceeded, nil)
	h.settle(tc)
	h.get(tc)
	if tc.Status.Plan != nil || tc.Annotations[jobs.AnnotationApprovePlan] != "" {
		t.Fatalf("the approval was not consumed: plan %+v, annotations %v", tc.Status.Plan, tc.Annotations)
	}
	if !conditions.IsTrue(tc.Status.Conditions, conditions.ApplyJobSucceeded) {
		t.Fatalf("conditions = %+v", tc.Status.Conditions)
	}
	if ev := h.events(); countPrefix(ev, "Normal PlanApplied") != 1 {
		t.Errorf("events = %v", ev)
	}
	h.settle(tc)
	h.noRunningJob(jobs.KindCluster, "web")
}

func TestPlanChangedReplacesThePlanWithoutBackoff(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.provisioned(func(c *infrav1.TerraformCluster) { c.Spec.ApplyPolicy = infrav1.ApplyPolicyManual })
	h.setVariables(tc, `{"region":"us"}`)
	h.settle(tc)
	h.finish(h.runningJob(jobs.KindCluster, "web"), jobs.OutcomeSucceeded, &jobs.RunnerResult{Plan: &jobs.RunnerPlan{Hash: planA}})
	h.settle(tc)
	h.annotate(tc, jobs.AnnotationApprovePlan, planA)
	h.settle(tc)
	apply := h.runningJob(jobs.KindCluster, "web")
	h.finish(apply, jobs.OutcomeFailed, &jobs.RunnerResult{
		Error: &jobs.RunnerError{Kind: jobs.ErrorKindPlanChanged},
		Plan:  &jobs.RunnerPlan{Hash: planB, Counts: jobs.Counts{Add: 1}},
	})
	h.settle(tc)

	h.get(tc)
	if tc.Status.Plan == nil || tc.Status.Plan.PlanHash != planB {
		t.Fatalf("status.plan = %+v, want the new plan", tc.Status.Plan)
	}
	if c := conditions.Get(tc.Status.Conditions, conditions.ApplyJobSucceeded); c.Reason != conditions.ReasonPlanChanged || c.Status != metav1.ConditionUnknown {
		t.Fatalf("ApplyJobSucceeded = %+v", c)
	}
	// Approving the new plan applies at once: a plan change is no failure to back off from.
	h.annotate(tc, jobs.AnnotationApprovePlan, planB)
	h.settle(tc)
	next := h.runningJob(jobs.KindCluster, "web")
	if !hasArg(next, "--expect-plan="+planB) {
		t.Fatalf("Job %s: %v", next.Name, command(next))
	}
}

func TestBlockedDestructiveApplyWaitsForApprovalThenAppliesOnce(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.provisioned(nil)
	h.setVariables(tc, `{"region":"us"}`)
	h.settle(tc)
	apply := h.runningJob(jobs.KindCluster, "web")
	hash := apply.Annotations[jobs.AnnotationInputsHash]
	if !hasArg(apply, "--guard-deletes") || !hasArg(apply, "--inputs-hash="+hash) {
		t.Fatalf("a cluster apply is not guarded: %v", command(apply))
	}
	h.finish(apply, jobs.OutcomeFailed, &jobs.RunnerResult{
		Error: &jobs.RunnerError{Kind: jobs.ErrorKindBlocked},
		Plan:  &jobs.RunnerPlan{Counts: jobs.Counts{Add: 1, Destroy: 1}, Destructive: true, Resources: []jobs.ResourceChange{{Address: "module.workspace.terraform_data.a", Actions: []string{"delete", "create"}}}},
	})
	h.settle(tc)
	h.get(tc)
	c := conditions.Get(tc.Status.Conditions, conditions.ApplyJobSucceeded)
	if c.Status != metav1.ConditionFalse || c.Reason != conditions.ReasonDestructivePlanBlocked || !strings.Contains(c.Message, "module.workspace.terraform_data.a (replace)") {
		t.Fatalf("ApplyJobSucceeded = %+v", c)
	}
	if ev := h.events(); countPrefix(ev, "Warning DestructivePlanBlocked") != 1 {
		t.Errorf("events = %v", ev)
	}
	// No retry of these inputs, whatever the time.
	h.clock.SetTime(h.clock.Now().Add(time.Hour))
	h.settle(tc)
	h.noRunningJob(jobs.KindCluster, "web")

	h.annotate(tc, jobs.AnnotationApproveDestructivePlan, hash)
	h.settle(tc)
	approved := h.runningJob(jobs.KindCluster, "web")
	if !hasArg(approved, "--allow-deletes-hash="+hash) {
		t.Fatalf("approved apply: %v", command(approved))
	}
	h.finish(approved, jobs.OutcomeSucceeded, nil)
	h.settle(tc)
	h.get(tc)
	if _, ok := tc.Annotations[jobs.AnnotationApproveDestructivePlan]; ok {
		t.Fatal("the destructive approval was not consumed")
	}
	h.settle(tc)
	h.noRunningJob(jobs.KindCluster, "web")
	if n := len(h.jobs(jobs.KindCluster, "web")); n != 3 {
		t.Fatalf("%d Jobs, want the first apply, the blocked and the approved one", n)
	}
}

func TestRemediationStopsAtTheCapAndResumesAfterADriftCheck(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.provisioned(func(c *infrav1.TerraformCluster) {
		c.Spec.Drift = infrav1.DriftSpec{IntervalSeconds: ptr.To[int64](3600), Action: infrav1.DriftActionRemediate}
		c.Spec.Jobs.FailedJobsHistoryLimit = ptr.To[int32](2)
	})
	drift := func() {
		h.clock.SetTime(h.clock.Now().Add(2 * time.Hour))
		h.settle(tc)
		d := h.runningJob(jobs.KindCluster, "web")
		if jobs.OpOf(&d) != jobs.OpDrift {
			t.Fatalf("%s, want a drift check", d.Name)
		}
		h.finish(d, jobs.OutcomeSucceeded, &jobs.RunnerResult{Drift: &jobs.RunnerDrift{Detected: true, Counts: jobs.Counts{Change: 1}}})
		h.settle(tc)
	}
	drift()
	for i := 0; i < 2; i++ {
		remediation := h.runningJob(jobs.KindCluster, "web")
		if jobs.OpOf(&remediation) != jobs.OpApply || remediation.Annotations[jobs.AnnotationDriftRemediation] != "true" {
			t.Fatalf("remediation %d: %s %v", i, remediation.Name, remediation.Annotations)
		}
		// A run takes time: it fails after the second its drift check finished in (seed 001
		// counts failures strictly after the check).
		h.clock.SetTime(h.clock.Now().Add(time.Second))
		h.finish(remediation, jobs.OutcomeFailed, nil)
		h.settle(tc)
		h.clock.SetTime(h.clock.Now().Add(11 * time.Minute))
		h.settle(tc)
	}
	// At the cap of two: no more remediation, the drift stays pending.
	h.noRunningJob(jobs.KindCluster, "web")
	h.get(tc)
	if c := conditions.Get(tc.Status.Conditions, conditions.DriftDetected); c.Status != metav1.ConditionTrue || c.Reason != conditions.ReasonDriftPending {
		t.Fatalf("DriftDetected = %+v", c)
	}
	drift()
	resumed := h.runningJob(jobs.KindCluster, "web")
	if resumed.Annotations[jobs.AnnotationDriftRemediation] != "true" {
		t.Fatalf("after a new drift check: %s, want a remediation", resumed.Name)
	}
	h.finish(resumed, jobs.OutcomeSucceeded, nil)
	h.settle(tc)
	h.get(tc)
	if c := conditions.Get(tc.Status.Conditions, conditions.DriftDetected); c.Status != metav1.ConditionFalse {
		t.Fatalf("DriftDetected = %+v after a successful remediation", c)
	}
}

func TestDeletedRunningApplyLeavesTheMarkerAndTheNextApplyClearsIt(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.provisioned(nil)
	h.setVariables(tc, `{"region":"us"}`)
	h.settle(tc)
	running := h.runningJob(jobs.KindCluster, "web")
	background := metav1.DeletePropagationBackground
	if err := h.c.Delete(h.ctx, &running, &client.DeleteOptions{PropagationPolicy: &background}); err != nil {
		t.Fatal(err)
	}
	h.reconcile(tc)
	durable := h.secret(jobs.InputsSecretName(jobs.KindCluster, "web"))
	if durable.Annotations[jobs.AnnotationInterruptedApply] != running.Name {
		t.Fatalf("durable inputs annotations = %v", durable.Annotations)
	}
	h.get(tc)
	if c := conditions.Get(tc.Status.Conditions, conditions.ApplyJobSucceeded); c.Status != metav1.ConditionFalse || c.Message != workspace.InterruptedApplyMessage(running.Name) {
		t.Fatalf("ApplyJobSucceeded = %+v", c)
	}
	h.settle(tc)
	next := h.runningJob(jobs.KindCluster, "web")
	if next.Annotations[jobs.AnnotationAfterInterruptedApply] != running.Name {
		t.Fatalf("the next apply %s does not name the interrupted one: %v", next.Name, next.Annotations)
	}
	h.finish(next, jobs.OutcomeSucceeded, nil)
	h.settle(tc)
	if a := h.secret(jobs.InputsSecretName(jobs.KindCluster, "web")).Annotations; a[jobs.AnnotationInterruptedApply] != "" {
		t.Fatalf("the marker outlived a successful apply: %v", a)
	}
	h.settle(tc)
	h.noRunningJob(jobs.KindCluster, "web")
}

// planWaiting brings a Manual cluster to a plan that waits for approval, and returns the
// approval that approves it.
func planWaiting(h *harness, planHash string) (*infrav1.TerraformCluster, string, string) {
	h.t.Helper()
	tc := h.provisioned(func(c *infrav1.TerraformCluster) { c.Spec.ApplyPolicy = infrav1.ApplyPolicyManual })
	h.setVariables(tc, `{"region":"us"}`)
	h.settle(tc)
	h.finish(h.runningJob(jobs.KindCluster, "web"), jobs.OutcomeSucceeded, &jobs.RunnerResult{Plan: &jobs.RunnerPlan{Hash: planHash}})
	h.settle(tc)
	return tc, jobs.AnnotationApprovePlan, planHash
}

// blockedWaiting brings a cluster to an apply blocked before a destructive plan, and returns the
// approval that approves it.
func blockedWaiting(h *harness) (*infrav1.TerraformCluster, string, string) {
	h.t.Helper()
	tc := h.provisioned(nil)
	h.setVariables(tc, `{"region":"us"}`)
	h.settle(tc)
	apply := h.runningJob(jobs.KindCluster, "web")
	h.finish(apply, jobs.OutcomeFailed, &jobs.RunnerResult{
		Error: &jobs.RunnerError{Kind: jobs.ErrorKindBlocked},
		Plan:  &jobs.RunnerPlan{Counts: jobs.Counts{Destroy: 1}, Destructive: true, Resources: []jobs.ResourceChange{{Address: "module.workspace.terraform_data.a", Actions: []string{"delete"}}}},
	})
	h.settle(tc)
	return tc, jobs.AnnotationApproveDestructivePlan, apply.Annotations[jobs.AnnotationInputsHash]
}

func TestAnApprovalWaitsWhileThePolicyDoesNotKeepApprovalsToTheRunsAPIServer(t *testing.T) {
	const why = "the ValidatingAdmissionPolicyBinding captf-approval-annotations does not exist"
	for _, tc := range []struct {
		rule    string
		waiting func(*harness) (*infrav1.TerraformCluster, string, string)
		arg     string
	}{
		{"an approved plan", func(h *harness) (*infrav1.TerraformCluster, string, string) { return planWaiting(h, planA) }, "--expect-plan="},
		{"an approved destructive plan", blockedWaiting, "--allow-deletes-hash="},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			h := newHarness(t, jobs.KindCluster)
			obj, key, value := tc.waiting(h)
			h.guard.why = why
			h.events()
			h.annotate(obj, key, value)
			h.settle(obj)

			h.wantWaiting(obj, conditions.ReasonApprovalUnguarded, key+"="+value, why, "anyone who may edit this object could have written it", "kubectl captf approve")

			// Once the policy is in force, the same approval applies.
			h.guard.why = ""
			h.settle(obj)
			apply := h.runningJob(jobs.KindCluster, "web")
			if jobs.OpOf(&apply) != jobs.OpApply || !hasArg(apply, tc.arg+value) {
				t.Fatalf("Job %s: %v, want the approved apply", apply.Name, command(apply))
			}
		})
	}
}

func TestTheEmptyPlanAppliesWithoutTheApprovalPolicy(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	h.guard.why = "the ValidatingAdmissionPolicyBinding captf-approval-annotations does not exist"
	tc, _, _ := planWaiting(h, jobs.EmptyPlanHash)
	h.settle(tc)
	apply := h.runningJob(jobs.KindCluster, "web")
	if jobs.OpOf(&apply) != jobs.OpApply || !hasArg(apply, "--expect-plan="+jobs.EmptyPlanHash) {
		t.Fatalf("Job %s: %v, want the apply of the empty plan", apply.Name, command(apply))
	}
}

func TestWithoutRequiringThePolicyAnApprovalAppliesAndSaysWhereItCameFrom(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	h.r.Approvals = nil
	tc, key, value := planWaiting(h, planA)
	h.events()
	h.annotate(tc, key, value)
	h.settle(tc)
	apply := h.runningJob(jobs.KindCluster, "web")
	if !hasArg(apply, "--expect-plan="+planA) {
		t.Fatalf("Job %s: %v, want the approved apply", apply.Name, command(apply))
	}
	ev := h.events()
	found := false
	for _, e := range ev {
		found = found || strings.HasPrefix(e, "Warning ApprovalUnguarded") && strings.Contains(e, key+"="+value) && strings.Contains(e, "--require-approval-policy=false")
	}
	if !found {
		t.Errorf("no ApprovalUnguarded event names the approval and the flag: %v", ev)
	}
}

// The guard of an install reads the policy and its binding from the API server and trusts what
// it read for its TTL. The policy made here checks nothing, so the other tests are not judged by
// it: the guard reads only that it is there and bound.
func TestThePolicyGuardReadsThePolicyLiveAndTrustsItForItsTTL(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	g := &workspace.PolicyGuard{Reader: h.c, Clock: h.clock, TTL: workspace.ApprovalPolicyTTL}
	unguarded := func(want string) {
		t.Helper()
		why, err := g.Unguarded(h.ctx)
		if err != nil || (why == "") != (want == "") || !strings.Contains(why, want) {
			t.Fatalf("Unguarded = %q, %v; want %q", why, err, want)
		}
	}
	unguarded("ValidatingAdmissionPolicyBinding " + workspace.ApprovalPolicyName + " does not exist")

	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: workspace.ApprovalPolicyName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"example.invalid"}, APIVersions: []string{"v1"}, Resources: []string{"nothings"}},
			}}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "true"}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: workspace.ApprovalPolicyName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: workspace.ApprovalPolicyName, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	for _, obj := range []client.Object{policy, binding} {
		if err := h.c.Create(h.ctx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.c.Delete(context.Background(), obj) })
	}
	unguarded("does not exist") // what was read stays trusted for the TTL
	h.clock.SetTime(h.clock.Now().Add(workspace.ApprovalPolicyTTL))
	unguarded("")

	if err := h.c.Delete(h.ctx, binding); err != nil {
		t.Fatal(err)
	}
	unguarded("")
	h.clock.SetTime(h.clock.Now().Add(workspace.ApprovalPolicyTTL))
	unguarded("ValidatingAdmissionPolicyBinding " + workspace.ApprovalPolicyName + " does not exist")
}

package workspace_test

import (
	"encoding/json"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
)

// clusterOutputs are contractOutputs with other exports.
func clusterOutputs(exports string) string {
	return strings.Replace(contractOutputs, `"exports":{"vpc":"vpc-1"}`, `"exports":`+exports, 1)
}

// A pool's apply that carries a change of its cluster's exports stops before a destructive plan;
// while the change waits for approval the pool applies everything else with the exports it
// applied last; approved, the change applies once.
func TestAChangeOfTheClustersExportsIsGuardedAndHeldForAPool(t *testing.T) {
	h := newHarness(t, jobs.KindMachinePool)
	h.create(plainCluster(h, "web"))
	h.writeState(jobs.KindCluster, "web", 1)
	h.markApplied(jobs.KindCluster, "web")
	pool := &infrav1.TerraformMachinePool{
		ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: h.ns, Labels: map[string]string{jobs.LabelClusterName: "web"}},
		Spec: infrav1.TerraformMachinePoolSpec{
			WorkspaceSpec: infrav1.WorkspaceSpec{Source: infrav1.SourceSpec{Image: image}, Variables: &apiextensionsv1.JSON{Raw: []byte(`{"size":1}`)}},
			Drift:         infrav1.DriftSpec{IntervalSeconds: ptr.To[int64](0)},
		},
	}
	h.create(pool)
	// finishRefresh lets the refresh that may follow an apply succeed.
	finishRefresh := func() {
		h.t.Helper()
		h.settle(pool)
		for _, r := range h.jobs(jobs.KindMachinePool, "p1") {
			if !jobs.OutcomeOf(&r).Finished() && jobs.OpOf(&r) == jobs.OpRefresh {
				h.finish(r, jobs.OutcomeSucceeded, nil)
				h.settle(pool)
			}
		}
	}

	h.settle(pool)
	first := h.runningJob(jobs.KindMachinePool, "p1")
	if hasArg(first, "--guard-deletes") || first.Annotations[workspace.AnnotationClusterOutputsHash] == "" {
		t.Fatalf("the first apply: guarded %v, exports hash %q", hasArg(first, "--guard-deletes"), first.Annotations[workspace.AnnotationClusterOutputsHash])
	}
	h.writeState(jobs.KindMachinePool, "p1", 1)
	h.finish(first, jobs.OutcomeSucceeded, nil)
	finishRefresh()
	durable := h.secret(jobs.InputsSecretName(jobs.KindMachinePool, "p1"))
	if durable.Annotations[workspace.AnnotationAppliedClusterOutputsHash] != first.Annotations[workspace.AnnotationClusterOutputsHash] ||
		string(durable.Data[workspace.AppliedClusterOutputsKey]) != `{"vpc":"vpc-1"}` {
		t.Fatalf("the applied exports were not recorded: %v %q", durable.Annotations, durable.Data[workspace.AppliedClusterOutputsKey])
	}

	// The cluster's exports change: the pool's apply is guarded, and blocked.
	h.writeStateWith(jobs.KindCluster, "web", 1, 2, clusterOutputs(`{"vpc":"vpc-2"}`))
	h.settle(pool)
	guarded := h.runningJob(jobs.KindMachinePool, "p1")
	if !hasArg(guarded, "--guard-deletes") {
		t.Fatalf("an apply with changed exports is not guarded: %v", command(guarded))
	}
	h.finish(guarded, jobs.OutcomeFailed, &jobs.RunnerResult{
		Error: &jobs.RunnerError{Kind: jobs.ErrorKindBlocked},
		Plan:  &jobs.RunnerPlan{Counts: jobs.Counts{Add: 1, Destroy: 1}, Destructive: true, Resources: []jobs.ResourceChange{{Address: "module.workspace.terraform_data.node", Actions: []string{"delete", "create"}}}},
	})
	h.settle(pool)
	var pending map[string]string
	if err := json.Unmarshal([]byte(h.secret(jobs.InputsSecretName(jobs.KindMachinePool, "p1")).Annotations[workspace.AnnotationPendingClusterOutputs]), &pending); err != nil || pending["job"] != guarded.Name {
		t.Fatalf("the blocked change was not recorded: %v %v", pending, err)
	}

	// Held: another change applies, unguarded, with the exports applied last.
	h.get(pool)
	pool.Spec.Variables.Raw = []byte(`{"size":2}`)
	if err := h.c.Update(h.ctx, pool); err != nil {
		t.Fatal(err)
	}
	h.settle(pool)
	held := h.runningJob(jobs.KindMachinePool, "p1")
	vars := string(h.secret(jobs.InputsSecretName(jobs.KindMachinePool, "p1")).Data["terraform.tfvars.json"])
	if hasArg(held, "--guard-deletes") || held.Annotations[workspace.AnnotationHeldClusterOutputs] != "true" ||
		!strings.Contains(vars, `"captf_cluster_outputs":{"vpc":"vpc-1"}`) || !strings.Contains(vars, `"size":2`) {
		t.Fatalf("the held apply: guarded %v, variables %s", hasArg(held, "--guard-deletes"), vars)
	}
	h.finish(held, jobs.OutcomeSucceeded, nil)
	finishRefresh()
	h.noRunningJob(jobs.KindMachinePool, "p1")

	// Approved, the change applies once with its deletes allowed.
	h.annotate(pool, jobs.AnnotationApproveDestructivePlan, pending["inputsHash"])
	h.get(pool)
	pool.Spec.Variables.Raw = []byte(`{"size":1}`)
	if err := h.c.Update(h.ctx, pool); err != nil {
		t.Fatal(err)
	}
	h.settle(pool)
	approved := h.runningJob(jobs.KindMachinePool, "p1")
	if !hasArg(approved, "--allow-deletes-hash="+pending["inputsHash"]) {
		t.Fatalf("the approved apply: %v", command(approved))
	}
	h.finish(approved, jobs.OutcomeSucceeded, nil)
	finishRefresh()
	durable = h.secret(jobs.InputsSecretName(jobs.KindMachinePool, "p1"))
	if _, ok := durable.Annotations[workspace.AnnotationPendingClusterOutputs]; ok || string(durable.Data[workspace.AppliedClusterOutputsKey]) != `{"vpc":"vpc-2"}` {
		t.Fatalf("after the approved apply: %v %q", durable.Annotations, durable.Data[workspace.AppliedClusterOutputsKey])
	}
	h.get(pool)
	if !conditions.IsTrue(pool.Status.Conditions, conditions.ApplyJobSucceeded) {
		t.Fatalf("conditions = %+v", pool.Status.Conditions)
	}
}

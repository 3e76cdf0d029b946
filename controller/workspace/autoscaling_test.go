package workspace_test

import (
	"encoding/json"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/contract"
	"github.com/captf/captf/jobs"
)

// scaleMachinePool sets the MachinePool's spec.replicas, as the cluster autoscaler does, and
// its autoscaler bounds.
func (h *harness) scaleMachinePool(name string, replicas int32, bounds map[string]string) {
	h.t.Helper()
	var mp clusterv1.MachinePool
	if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: name}, &mp); err != nil {
		h.t.Fatal(err)
	}
	patch := client.MergeFrom(mp.DeepCopy())
	mp.Spec.Replicas = ptr.To(replicas)
	for k, v := range bounds {
		metav1.SetMetaDataAnnotation(&mp.ObjectMeta, k, v)
	}
	if err := h.c.Patch(h.ctx, &mp, patch); err != nil {
		h.t.Fatal(err)
	}
}

// renderedReplicas is the replicas input of the pool's running Job, from its durable inputs.
func (h *harness) renderedReplicas(name string) float64 {
	h.t.Helper()
	var vars map[string]any
	if err := json.Unmarshal(h.secret(jobs.InputsSecretName(jobs.KindMachinePool, name)).Data["terraform.tfvars.json"], &vars); err != nil {
		h.t.Fatal(err)
	}
	n, _ := vars[contract.InputReplicas].(float64)
	return n
}

// Under the cluster autoscaler's annotations, the module gets the MachinePool's spec.replicas,
// which the autoscaler writes, within its bounds: each step the autoscaler takes is applied.
func TestThePoolsOwnCountNeverOverridesTheMachinePools(t *testing.T) {
	h := newHarness(t, jobs.KindMachinePool)
	pool := &infrav1.TerraformMachinePool{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: h.ns},
		Spec: infrav1.TerraformMachinePoolSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Source: infrav1.SourceSpec{Image: image}, Variables: &apiextensionsv1.JSON{Raw: []byte(`{}`)}}}}
	h.create(pool)
	bounds := map[string]string{contract.AnnotationAutoscalerMin: "1", contract.AnnotationAutoscalerMax: "5"}
	h.scaleMachinePool("p1", 2, bounds)
	h.settle(pool)
	if got := h.renderedReplicas("p1"); got != 2 {
		t.Fatalf("the first apply renders replicas %v, want the MachinePool's 2", got)
	}
	// The module reports a count of its own (contractOutputs: 1), which becomes status.replicas.
	h.writeState(jobs.KindMachinePool, "p1", 1)
	h.finish(h.runningJob(jobs.KindMachinePool, "p1"), jobs.OutcomeSucceeded, nil)
	h.settle(pool)
	h.get(pool)
	if pool.Status.Replicas == nil || *pool.Status.Replicas != 1 {
		t.Fatalf("status.replicas = %v, want the module's 1", pool.Status.Replicas)
	}
	for _, j := range h.jobs(jobs.KindMachinePool, "p1") {
		if !jobs.OutcomeOf(&j).Finished() {
			h.finish(j, jobs.OutcomeSucceeded, nil)
			h.settle(pool)
		}
	}

	h.scaleMachinePool("p1", 4, bounds)
	h.settle(pool)
	if job := h.runningJob(jobs.KindMachinePool, "p1"); jobs.OpOf(&job) != jobs.OpApply {
		t.Fatalf("running %s, want the apply of the autoscaler's step", jobs.OpOf(&job))
	}
	if got := h.renderedReplicas("p1"); got != 4 {
		t.Fatalf("replicas %v, want the MachinePool's 4", got)
	}
}

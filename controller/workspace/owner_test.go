package workspace_test

import (
	"encoding/base64"
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/test/capitest"
)

// wantDependencies checks DependenciesReady and that no Job was started.
func (h *harness) wantDependencies(obj infrav1.Workspace, kind jobs.Kind, status metav1.ConditionStatus, reason string) {
	h.t.Helper()
	h.get(obj)
	c := conditions.Get(obj.WorkspaceStatus().Conditions, conditions.DependenciesReady)
	if c == nil || c.Status != status || c.Reason != reason {
		h.t.Fatalf("DependenciesReady = %+v, want %s/%s", c, status, reason)
	}
	if status != metav1.ConditionTrue {
		if n := len(h.jobs(kind, obj.GetName())); n != 0 {
			h.t.Fatalf("%d Jobs started while Cluster API's objects are not ready", n)
		}
		if ready := conditions.Get(obj.WorkspaceStatus().Conditions, conditions.Ready); ready == nil || ready.Reason != reason {
			h.t.Fatalf("Ready = %+v, want it to carry %s", ready, reason)
		}
	}
}

func plainCluster(h *harness, name string) *infrav1.TerraformCluster {
	return &infrav1.TerraformCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns},
		Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: infrav1.WorkspaceSpec{
			Source: infrav1.SourceSpec{Image: image}, Variables: &apiextensionsv1.JSON{Raw: []byte(`{"region":"eu"}`)},
		}},
	}
}

func TestAClusterRunsOnlyForTheClusterThatOwnsIt(t *testing.T) {
	for _, tc := range []struct {
		rule   string
		mutate func(h *harness, tc *infrav1.TerraformCluster)
		status metav1.ConditionStatus
		reason string
	}{
		{"without an owner it waits for Cluster API", func(*harness, *infrav1.TerraformCluster) {}, metav1.ConditionUnknown, conditions.ReasonWaitingForOwner},
		{"an owner whose infrastructureRef names another object is refused", func(h *harness, tc *infrav1.TerraformCluster) {
			h.own(tc)
			h.patchCluster(tc.Name, func(c *clusterv1.Cluster) { c.Spec.InfrastructureRef.Name = "other" })
		}, metav1.ConditionFalse, conditions.ReasonOwnerMismatch},
		{"an owner reference with another UID is refused", func(h *harness, tc *infrav1.TerraformCluster) {
			h.own(tc)
			tc.OwnerReferences[0].UID = types.UID("00000000-0000-0000-0000-000000000000")
		}, metav1.ConditionFalse, conditions.ReasonOwnerMismatch},
		{"a cluster-name label naming another cluster is refused", func(h *harness, tc *infrav1.TerraformCluster) {
			h.own(tc)
			tc.Labels[jobs.LabelClusterName] = "elsewhere"
		}, metav1.ConditionFalse, conditions.ReasonOwnerMismatch},
		{"an owner that is gone is not found", func(h *harness, tc *infrav1.TerraformCluster) {
			h.own(tc)
			tc.OwnerReferences[0].Name = "gone"
		}, metav1.ConditionFalse, conditions.ReasonOwnerNotFound},
		{"the Cluster that names it back owns it", func(h *harness, tc *infrav1.TerraformCluster) { h.own(tc) }, metav1.ConditionTrue, conditions.ReasonDependenciesReady},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			h := newHarness(t, jobs.KindCluster)
			obj := plainCluster(h, "web")
			tc.mutate(h, obj)
			if err := h.c.Create(h.ctx, obj); err != nil {
				t.Fatal(err)
			}
			h.settle(obj)
			h.wantDependencies(obj, jobs.KindCluster, tc.status, tc.reason)
			if tc.status == metav1.ConditionTrue && len(h.jobs(jobs.KindCluster, "web")) != 1 {
				t.Fatal("an owned cluster started no apply")
			}
		})
	}
}

// own gives obj its Cluster API owner, as the harness's create does.
func (h *harness) own(obj client.Object) {
	h.t.Helper()
	if err := capitest.Own(h.ctx, h.c, obj); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) patchCluster(name string, mutate func(*clusterv1.Cluster)) {
	h.t.Helper()
	var c clusterv1.Cluster
	if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: name}, &c); err != nil {
		h.t.Fatal(err)
	}
	patch := client.MergeFrom(c.DeepCopy())
	mutate(&c)
	// Each write answers with what the server stores, so each goes from its own copy.
	if err := h.c.Patch(h.ctx, c.DeepCopy(), patch); err != nil {
		h.t.Fatal(err)
	}
	if err := h.c.Status().Patch(h.ctx, c.DeepCopy(), patch); err != nil {
		h.t.Fatal(err)
	}
}

func machine(h *harness, name string) *infrav1.TerraformMachine {
	return &infrav1.TerraformMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns, Labels: map[string]string{jobs.LabelClusterName: "web"}},
		Spec: infrav1.TerraformMachineSpec{WorkspaceSpec: infrav1.WorkspaceSpec{
			Source: infrav1.SourceSpec{Image: image}, Variables: &apiextensionsv1.JSON{Raw: []byte(`{}`)},
		}},
	}
}

func TestAMachineWaitsForWhatClusterAPIProvides(t *testing.T) {
	for _, tc := range []struct {
		rule   string
		mutate func(h *harness, m *infrav1.TerraformMachine)
		status metav1.ConditionStatus
		reason string
	}{
		{"owned by a control plane but not yet by a Machine", func(h *harness, m *infrav1.TerraformMachine) {
			m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "controlplane.cluster.x-k8s.io/v1beta2", Kind: "KubeadmControlPlane", Name: "cp", UID: "u-1"}}
		}, metav1.ConditionFalse, conditions.ReasonWaitingForOwnerMachine},
		{"a Cluster whose infrastructure is not provisioned", func(h *harness, m *infrav1.TerraformMachine) {
			h.own(m)
			h.patchCluster("web", func(c *clusterv1.Cluster) { c.Status.Initialization.InfrastructureProvisioned = nil })
		}, metav1.ConditionUnknown, conditions.ReasonWaitingForClusterInfrastructure},
		{"a Cluster whose infrastructure is not captf's", func(h *harness, m *infrav1.TerraformMachine) {
			h.own(m)
			h.patchCluster("web", func(c *clusterv1.Cluster) {
				c.Spec.InfrastructureRef = clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "DockerCluster", Name: "web"}
			})
		}, metav1.ConditionFalse, conditions.ReasonClusterNotTerraform},
		{"a TerraformCluster without an applied state has no exports yet", func(h *harness, m *infrav1.TerraformMachine) {
			h.create(plainCluster(h, "web"))
			h.own(m)
		}, metav1.ConditionUnknown, conditions.ReasonWaitingForClusterExports},
		{"a Machine without bootstrap data yet", func(h *harness, m *infrav1.TerraformMachine) {
			h.own(m)
			h.deleteSecret(m.Name + "-bootstrap")
		}, metav1.ConditionUnknown, conditions.ReasonWaitingForBootstrapData},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			h := newHarness(t, jobs.KindMachine)
			m := machine(h, "m1")
			tc.mutate(h, m)
			if err := h.c.Create(h.ctx, m); err != nil {
				t.Fatal(err)
			}
			h.settle(m)
			h.wantDependencies(m, jobs.KindMachine, tc.status, tc.reason)
		})
	}
}

func (h *harness) deleteSecret(name string) {
	h.t.Helper()
	if err := h.c.Delete(h.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns}}); err != nil {
		h.t.Fatal(err)
	}
}

// The inputs a machine's module gets come from its Machine, its bootstrap data Secret and its
// cluster's state: what the durable inputs hold is what the Job ran.
func TestAMachineRendersItsContractInputs(t *testing.T) {
	h := newHarness(t, jobs.KindMachine)
	cluster := plainCluster(h, "web")
	h.create(cluster)
	h.writeState(jobs.KindCluster, "web", 1)
	h.markApplied(jobs.KindCluster, "web")
	m := machine(h, "m1")
	h.create(m)
	h.settle(m)
	h.wantDependencies(m, jobs.KindMachine, metav1.ConditionTrue, conditions.ReasonDependenciesReady)
	durable := h.secret(jobs.InputsSecretName(jobs.KindMachine, "m1"))
	if durable == nil {
		t.Fatal("no durable inputs: no apply started")
	}
	var vars map[string]any
	if err := json.Unmarshal(durable.Data["terraform.tfvars.json"], &vars); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		rule string
		got  any
		want any
	}{
		{"the machine is named after its Machine", vars["machine_name"], "m1"},
		{"the bootstrap data is the Secret's value, base64", vars["bootstrap_data"], base64.StdEncoding.EncodeToString([]byte(capitest.BootstrapData))},
		{"the bootstrap format is the Secret's", vars["bootstrap_format"], "cloud-config"},
		{"the cluster's exports come from its state", vars["captf_cluster_outputs"], map[string]any{"vpc": "vpc-1"}},
		{"the cluster is the Machine's", vars["captf_cluster"], map[string]any{"name": "web", "namespace": h.ns}},
	} {
		if !equalJSON(tc.got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.rule, tc.got, tc.want)
		}
	}
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// markApplied records an inputs hash on an object's state, as a successful apply does.
func (h *harness) markApplied(kind jobs.Kind, name string) {
	h.t.Helper()
	s := h.stateSecret(kind, name)
	patch := client.MergeFrom(s.DeepCopy())
	metav1.SetMetaDataAnnotation(&s.ObjectMeta, state.InputsHashAnnotation, "h1:applied")
	if err := h.c.Patch(h.ctx, s, patch); err != nil {
		h.t.Fatal(err)
	}
}

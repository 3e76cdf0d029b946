package workspace_test

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/controller/workspace"
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

// bootstrapSecret is a Secret holding bootstrap data, of the type, cluster-name label ("" for
// none) and owner references given.
func bootstrapSecret(name string, typ corev1.SecretType, cluster string, owners ...metav1.OwnerReference) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: owners}, Type: typ,
		Data: map[string][]byte{"value": []byte("secret-bootstrap-" + name), "format": []byte("cloud-config")}}
	if cluster != "" {
		s.Labels = map[string]string{clusterv1.ClusterNameLabel: cluster}
	}
	return s
}

// controlledBy is a controller reference to an object of Cluster API or a provider.
func controlledBy(apiVersion, kind, name string) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID(kind + "-" + name), Controller: ptr.To(true)}
}

// pointBootstrap makes the Machine or MachinePool of the name name the bootstrap data Secret
// secret and the bootstrap config configRef, as its bootstrap provider or a person would.
func (h *harness) pointBootstrap(owner client.Object, secret string, configRef clusterv1.ContractVersionedObjectReference) {
	h.t.Helper()
	h.get(owner)
	patch := client.MergeFrom(owner.DeepCopyObject().(client.Object))
	b := clusterv1.Bootstrap{DataSecretName: ptr.To(secret), ConfigRef: configRef}
	switch o := owner.(type) {
	case *clusterv1.Machine:
		o.Spec.Bootstrap = b
	case *clusterv1.MachinePool:
		o.Spec.Template.Spec.Bootstrap = b
	}
	if err := h.c.Patch(h.ctx, owner, patch); err != nil {
		h.t.Fatal(err)
	}
}

// wantBootstrapRefused checks that the object waits for a bootstrap data Secret it refuses: no
// Job, DependenciesReady (and Ready) False/BootstrapDataRefused naming the Secret and why, one
// Warning event however many passes see it, and the data shown nowhere.
func (h *harness) wantBootstrapRefused(obj infrav1.Workspace, kind jobs.Kind, secret, why string) {
	h.t.Helper()
	h.wantDependencies(obj, kind, metav1.ConditionFalse, conditions.ReasonBootstrapDataRefused)
	c := conditions.Get(obj.WorkspaceStatus().Conditions, conditions.DependenciesReady)
	if !strings.Contains(c.Message, "Secret "+secret) || !strings.Contains(c.Message, why) {
		h.t.Errorf("DependenciesReady message %q does not name the Secret %s and %q", c.Message, secret, why)
	}
	h.settle(obj)
	events := h.events()
	if n := countPrefix(events, "Warning "+workspace.EventBootstrapDataRefused); n != 1 {
		h.t.Errorf("%d Warning %s events, want 1: %v", n, workspace.EventBootstrapDataRefused, events)
	}
	for _, text := range append(events, c.Message) {
		if strings.Contains(text, "secret-bootstrap-") {
			h.t.Errorf("the bootstrap data shows: %s", text)
		}
	}
}

// A Machine's dataSecretName is only a name, which whoever may write Machines chooses: a Secret
// is the Machine's bootstrap data only when it is of Cluster API's type, labelled for the
// Machine's cluster, not the cluster's kubeconfig, and controlled by the Machine's bootstrap
// config (by nothing of Cluster API when it names none, as data a person provides).
func TestAMachineTakesOnlyBootstrapDataWrittenForIt(t *testing.T) {
	none := clusterv1.ContractVersionedObjectReference{}
	config := clusterv1.ContractVersionedObjectReference{APIGroup: "bootstrap.cluster.x-k8s.io", Kind: "KubeadmConfig", Name: "m1"}
	byCluster := metav1.OwnerReference{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: "web", UID: "cluster-web"}
	for _, tc := range []struct {
		rule      string
		secret    *corev1.Secret
		configRef clusterv1.ContractVersionedObjectReference
		why       string // "" when taken
	}{
		{"the cluster's kubeconfig Secret, of another type, is refused",
			bootstrapSecret("web-kubeconfig", corev1.SecretTypeOpaque, "web"), none, `its type is "Opaque"`},
		{"the cluster's kubeconfig as Cluster API writes it, of its type and label, is refused",
			bootstrapSecret("web-kubeconfig", clusterv1.ClusterSecretType, "web", byCluster), none, "the cluster's kubeconfig"},
		{"a Secret of Cluster API's type labelled for another cluster is refused",
			bootstrapSecret("data", clusterv1.ClusterSecretType, "other"), none, `is "other", not the cluster web`},
		{"a Secret of Cluster API's type without the cluster-name label is refused",
			bootstrapSecret("data", clusterv1.ClusterSecretType, ""), none, `is "", not the cluster web`},
		{"a Secret a control plane controls is refused when the Machine names no bootstrap config",
			bootstrapSecret("data", clusterv1.ClusterSecretType, "web", controlledBy("controlplane.cluster.x-k8s.io/v1beta2", "KubeadmControlPlane", "web")), none, "controlled by KubeadmControlPlane web"},
		{"bootstrap data another bootstrap config controls is refused",
			bootstrapSecret("data", clusterv1.ClusterSecretType, "web", controlledBy("bootstrap.cluster.x-k8s.io/v1beta2", "KubeadmConfig", "m2")), config, "not controlled by the bootstrap config KubeadmConfig m1"},
		{"bootstrap data nothing controls is refused when the Machine names a bootstrap config",
			bootstrapSecret("data", clusterv1.ClusterSecretType, "web"), config, "not controlled by the bootstrap config KubeadmConfig m1"},
		{"bootstrap data the Machine's bootstrap config controls is taken",
			bootstrapSecret("data", clusterv1.ClusterSecretType, "web", controlledBy("bootstrap.cluster.x-k8s.io/v1beta2", "KubeadmConfig", "m1")), config, ""},
		{"bootstrap data a person provides, of the type and the cluster's label, is taken",
			bootstrapSecret("data", clusterv1.ClusterSecretType, "web", byCluster), none, ""},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			h := newHarness(t, jobs.KindMachine)
			m := machine(h, "m1")
			h.own(m)
			tc.secret.Namespace = h.ns
			if err := h.c.Create(h.ctx, tc.secret); err != nil {
				t.Fatal(err)
			}
			h.pointBootstrap(&clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m1", Namespace: h.ns}}, tc.secret.Name, tc.configRef)
			if err := h.c.Create(h.ctx, m); err != nil {
				t.Fatal(err)
			}
			h.settle(m)
			if tc.why != "" {
				h.wantBootstrapRefused(m, jobs.KindMachine, tc.secret.Name, tc.why)
				return
			}
			h.wantDependencies(m, jobs.KindMachine, metav1.ConditionTrue, conditions.ReasonDependenciesReady)
			if len(h.jobs(jobs.KindMachine, "m1")) != 1 {
				t.Fatal("the Machine's own bootstrap data started no apply")
			}
		})
	}
}

// A MachinePool's bootstrap data is held to the same rules as a Machine's.
func TestAMachinePoolTakesOnlyBootstrapDataWrittenForIt(t *testing.T) {
	h := newHarness(t, jobs.KindMachinePool)
	pool := &infrav1.TerraformMachinePool{
		ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: h.ns, Labels: map[string]string{jobs.LabelClusterName: "web"}},
		Spec: infrav1.TerraformMachinePoolSpec{WorkspaceSpec: infrav1.WorkspaceSpec{
			Source: infrav1.SourceSpec{Image: image}, Variables: &apiextensionsv1.JSON{Raw: []byte(`{}`)},
		}},
	}
	h.own(pool)
	kubeconfig := bootstrapSecret("web-kubeconfig", corev1.SecretTypeOpaque, "web")
	kubeconfig.Namespace = h.ns
	if err := h.c.Create(h.ctx, kubeconfig); err != nil {
		t.Fatal(err)
	}
	owner := &clusterv1.MachinePool{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: h.ns}}
	h.pointBootstrap(owner, kubeconfig.Name, clusterv1.ContractVersionedObjectReference{})
	if err := h.c.Create(h.ctx, pool); err != nil {
		t.Fatal(err)
	}
	h.settle(pool)
	h.wantBootstrapRefused(pool, jobs.KindMachinePool, kubeconfig.Name, `its type is "Opaque"`)

	// Pointed at the bootstrap data written for it, the pool applies.
	h.pointBootstrap(owner, "p1-bootstrap", clusterv1.ContractVersionedObjectReference{})
	h.settle(pool)
	h.wantDependencies(pool, jobs.KindMachinePool, metav1.ConditionTrue, conditions.ReasonDependenciesReady)
	if len(h.jobs(jobs.KindMachinePool, "p1")) != 1 {
		t.Fatal("the pool's own bootstrap data started no apply")
	}
}

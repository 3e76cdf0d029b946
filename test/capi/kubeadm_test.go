package capi

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/contract"
	"github.com/captf/captf/controller/inputs"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/test/system"
)

// Cluster API's kubeadm bootstrap provider (CABPK), run for real, writes every Machine's
// bootstrap data, and captf provisions each machine with it: a stand-alone control plane
// Machine gets `kubeadm init` data, and once it has a Node, the workers of a MachineDeployment
// get `kubeadm join` data for the Cluster's endpoint, the CA CABPK made and a bootstrap token
// it created in the workload cluster.
//
// Two things stand in for what cannot run here. The local kube-apiserver is the workload
// cluster: the test writes <cluster>-kubeconfig with its admin kubeconfig, as a control plane
// provider would, before CABPK's CA exists, so Cluster API (which writes one for stand-alone
// control planes from that CA, for an endpoint nothing serves) keeps it. And the test creates
// the control plane machine's Node, with the provider ID the module returned, as the kubelet
// that `kubeadm init` starts would; no kubelet runs on a machine of the no-op module.
func TestKubeadmBootstrapsTheMachines(t *testing.T) {
	s := system.NewSuite(t, "capi-kubeadm")
	_, cluster := createCluster(t, s, "web")
	workloadKubeconfig(t, s, cluster)
	// Provider IDs name Nodes of the one workload cluster all tests share.
	cp := s.NS + "-cp"
	kubeadmControlPlaneMachine(t, s, cluster, cp)
	kubeadmMachineDeployment(t, s, "web", "web-md-0", 2)

	cpID := map[string]bool{"local://" + cp: true}
	s.Eventually("the control plane machine is provisioned with its init data", 4*time.Minute, func(ctx context.Context) (bool, error) {
		var m clusterv1.Machine
		err := s.C.Get(ctx, client.ObjectKey{Namespace: s.NS, Name: cp}, &m)
		return err == nil && cpID[m.Spec.ProviderID], client.IgnoreNotFound(err)
	})
	registerNodes(t, s, cpID)
	nodesJoined(t, s, cluster, cpID)
	providerIDs(t, s, 3)

	ca := clusterCA(t, s, cluster, cp)
	var machines clusterv1.MachineList
	if err := s.C.List(s.Ctx, &machines, client.InNamespace(s.NS)); err != nil {
		t.Fatal(err)
	}
	for i := range machines.Items {
		m := &machines.Items[i]
		data := kubeadmBootstrapData(t, s, m)
		if _, isControlPlane := m.Labels[clusterv1.MachineControlPlaneLabel]; isControlPlane {
			if !strings.Contains(data, "kubeadm init --config") {
				t.Errorf("the control plane machine %s's bootstrap data does not run kubeadm init:\n%s", m.Name, data)
			}
			continue
		}
		checkJoinData(t, s, m, data, ca)
	}
	// CABPK answers the conversions of its own group: an older client reads its kinds.
	out, err := s.Sys.Env.Kubectl(s.Ctx, "get", "kubeadmconfigs.v1beta1.bootstrap.cluster.x-k8s.io", cp, "-n", s.NS, "-o", "jsonpath={.apiVersion}").Output()
	if err != nil || string(out) != "bootstrap.cluster.x-k8s.io/v1beta1" {
		t.Fatalf("the KubeadmConfig as v1beta1: %q %v", out, err)
	}
}

// The kubeadm bootstrap provider's kinds, read as unstructured objects: its Go types would
// bring k8s.io/cluster-bootstrap into captf's module for the tests alone.
var (
	kubeadmConfigKind         = schema.GroupVersionKind{Group: "bootstrap.cluster.x-k8s.io", Version: "v1beta2", Kind: "KubeadmConfig"}
	kubeadmConfigTemplateKind = schema.GroupVersionKind{Group: "bootstrap.cluster.x-k8s.io", Version: "v1beta2", Kind: "KubeadmConfigTemplate"}
)

// kubeadmObject is an empty object of a kubeadm bootstrap kind: CABPK's defaults make a
// minimal KubeadmConfig, enough for init and join data.
func kubeadmObject(gvk schema.GroupVersionKind, namespace, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}

// kubeadmCluster creates the cluster name (createCluster) with what its kubeadm-bootstrapped
// workers need: the workload kubeconfig, local Nodes for its machines (localNodes) and a
// stand-alone control plane machine bootstrapped by CABPK, whose Node initializes the control
// plane, so CABPK writes the workers' join data.
func kubeadmCluster(t *testing.T, s *system.Suite, name string) (*infrav1.TerraformCluster, *clusterv1.Cluster) {
	t.Helper()
	tc, cluster := createCluster(t, s, name)
	workloadKubeconfig(t, s, cluster)
	localNodes(t, s)
	// Provider IDs name Nodes of the one workload cluster all tests share.
	kubeadmControlPlaneMachine(t, s, cluster, s.NS+"-cp")
	return tc, cluster
}

// kubeadmControlPlaneMachine creates a stand-alone control plane Machine on a TerraformMachine
// of the sample module, bootstrapped by a KubeadmConfig of its own.
func kubeadmControlPlaneMachine(t *testing.T, s *system.Suite, cluster *clusterv1.Cluster, name string) {
	t.Helper()
	tm := &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.NS}}
	tm.Spec.Source.Image = system.SampleNoopImage
	tm.Spec.Variables = &apiextensionsv1.JSON{Raw: []byte(fmt.Sprintf(`{"name":%q}`, name))}
	config := kubeadmObject(kubeadmConfigKind, s.NS, name)
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.NS, Labels: map[string]string{clusterv1.MachineControlPlaneLabel: ""}},
		Spec: clusterv1.MachineSpec{
			ClusterName: cluster.Name, Version: "v1.37.2",
			Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: kubeadmConfigKind.Group, Kind: kubeadmConfigKind.Kind, Name: name,
			}},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "TerraformMachine", Name: name},
		},
	}
	for _, obj := range []client.Object{tm, config, m} {
		if err := s.C.Create(s.Ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
}

// kubeadmMachineDeployment creates a KubeadmConfigTemplate and a MachineDeployment of replicas
// machines bootstrapped from it, on a TerraformMachineTemplate changed by mutate.
func kubeadmMachineDeployment(t *testing.T, s *system.Suite, cluster, name string, replicas int32, mutate ...func(*infrav1.TerraformMachineTemplate)) *clusterv1.MachineDeployment {
	t.Helper()
	tmpl := kubeadmObject(kubeadmConfigTemplateKind, s.NS, name)
	if err := s.C.Create(s.Ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	return newMachineDeployment(t, s, cluster, name, replicas, clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
		APIGroup: kubeadmConfigTemplateKind.Group, Kind: kubeadmConfigTemplateKind.Kind, Name: name,
	}}, mutate...)
}

// clusterCA returns the certificate of <cluster>-ca, which CABPK makes for a cluster whose
// control plane is stand-alone machines, controlled by the KubeadmConfig of the machine it
// initialized.
func clusterCA(t *testing.T, s *system.Suite, cluster *clusterv1.Cluster, controlPlane string) *x509.Certificate {
	t.Helper()
	var secret corev1.Secret
	if err := s.C.Get(s.Ctx, client.ObjectKey{Namespace: s.NS, Name: cluster.Name + "-ca"}, &secret); err != nil {
		t.Fatal(err)
	}
	if owner := metav1.GetControllerOf(&secret); owner == nil || owner.Kind != "KubeadmConfig" || owner.Name != controlPlane {
		t.Errorf("%s is controlled by %+v, want the KubeadmConfig %s", secret.Name, owner, controlPlane)
	}
	if len(secret.Data["tls.key"]) == 0 {
		t.Errorf("%s has no tls.key", secret.Name)
	}
	block, _ := pem.Decode(secret.Data["tls.crt"])
	if block == nil {
		t.Fatalf("%s has no PEM tls.crt", secret.Name)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// kubeadmBootstrapData checks that the Machine's bootstrap data Secret is the one its
// KubeadmConfig reports, written and controlled by CABPK, and that captf applied the machine
// with it, and returns its data.
func kubeadmBootstrapData(t *testing.T, s *system.Suite, m *clusterv1.Machine) string {
	t.Helper()
	config := kubeadmConfigOf(t, s, m)
	name, _, _ := unstructured.NestedString(config.Object, "status", "dataSecretName")
	if name == "" || m.Spec.Bootstrap.DataSecretName == nil || *m.Spec.Bootstrap.DataSecretName != name {
		t.Fatalf("the Machine %s's bootstrap data Secret %v is not its KubeadmConfig's %q", m.Name, m.Spec.Bootstrap.DataSecretName, name)
	}
	var secret corev1.Secret
	if err := s.C.Get(s.Ctx, client.ObjectKey{Namespace: s.NS, Name: name}, &secret); err != nil {
		t.Fatal(err)
	}
	if owner := metav1.GetControllerOf(&secret); owner == nil || owner.UID != config.GetUID() {
		t.Errorf("the bootstrap data Secret %s is controlled by %+v, want the KubeadmConfig %s", name, owner, config.GetName())
	}
	if secret.Type != clusterv1.ClusterSecretType || secret.Labels[clusterv1.ClusterNameLabel] != m.Spec.ClusterName {
		t.Errorf("the bootstrap data Secret %s has type %q and labels %v", name, secret.Type, secret.Labels)
	}
	value := secret.Data["value"]
	if got := appliedBootstrapData(t, s, jobs.KindMachine, m.Spec.InfrastructureRef.Name); got != base64.StdEncoding.EncodeToString(value) {
		t.Errorf("the TerraformMachine %s was applied with other bootstrap data than CABPK wrote", m.Spec.InfrastructureRef.Name)
	}
	return string(value)
}

// kubeadmConfigOf returns the KubeadmConfig a Machine names.
func kubeadmConfigOf(t *testing.T, s *system.Suite, m *clusterv1.Machine) *unstructured.Unstructured {
	t.Helper()
	config := kubeadmObject(kubeadmConfigKind, s.NS, m.Spec.Bootstrap.ConfigRef.Name)
	if err := s.C.Get(s.Ctx, client.ObjectKeyFromObject(config), config); err != nil {
		t.Fatal(err)
	}
	return config
}

// appliedBootstrapData returns the bootstrap_data input (base64) of a TerraformMachine's or
// TerraformMachinePool's last apply, from its durable inputs.
func appliedBootstrapData(t *testing.T, s *system.Suite, kind jobs.Kind, name string) string {
	t.Helper()
	var durable corev1.Secret
	if err := s.C.Get(s.Ctx, client.ObjectKey{Namespace: s.NS, Name: jobs.InputsSecretName(kind, name)}, &durable); err != nil {
		t.Fatal(err)
	}
	var vars map[string]any
	if err := json.Unmarshal(durable.Data[inputs.VarsFile], &vars); err != nil {
		t.Fatal(err)
	}
	data, _ := vars[contract.InputBootstrapData].(string)
	return data
}

// checkJoinData checks a worker's join data: kubeadm join to the Cluster's endpoint, the
// cluster CA pinned by its public key's hash, and a bootstrap token that CABPK created in the
// workload cluster's kube-system.
func checkJoinData(t *testing.T, s *system.Suite, m *clusterv1.Machine, data string, ca *x509.Certificate) {
	t.Helper()
	config := kubeadmConfigOf(t, s, m)
	sum := sha256.Sum256(ca.RawSubjectPublicKeyInfo)
	token, _, _ := unstructured.NestedString(config.Object, "spec", "joinConfiguration", "discovery", "bootstrapToken", "token")
	for _, want := range []string{
		"kubeadm join --config",
		"apiServerEndpoint: web.local:6443",
		"sha256:" + hex.EncodeToString(sum[:]),
		"token: " + token,
	} {
		if !strings.Contains(data, want) {
			t.Errorf("the worker %s's bootstrap data lacks %q:\n%s", m.Name, want, data)
		}
	}
	id, _, ok := strings.Cut(token, ".")
	if !ok {
		t.Fatalf("the worker %s's KubeadmConfig has no bootstrap token: %q", m.Name, token)
	}
	var secret corev1.Secret
	if err := s.C.Get(s.Ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: "bootstrap-token-" + id}, &secret); err != nil {
		t.Errorf("the worker %s's bootstrap token in the workload cluster: %v", m.Name, err)
	}
}

// Package capi runs Cluster API's own core manager against captf: the contract as Cluster API
// reads it, not as captf's tests play it.
package capi

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/test/system"
)

func TestMain(m *testing.M) {
	os.Exit(system.Main(m, system.Options{ClusterAPI: true}))
}

// A Cluster whose infrastructure is a TerraformCluster: Cluster API owns it, reads its
// provisioning and copies the endpoint the module returned.
func TestClusterAPIProvisionsAClusterThroughCaptf(t *testing.T) {
	s := system.NewSuite(t, "capi")
	ctx := context.Background()
	tc, cluster := createCluster(t, s, "web")
	s.Eventually("Cluster API sees the infrastructure provisioned, with the module's endpoint", 3*time.Minute, func(ctx context.Context) (bool, error) {
		if err := s.C.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
			return false, err
		}
		p := cluster.Status.Initialization.InfrastructureProvisioned
		return p != nil && *p && cluster.Spec.ControlPlaneEndpoint.Host == "web.local", nil
	})
	if err := s.C.Get(ctx, client.ObjectKeyFromObject(tc), tc); err != nil {
		t.Fatal(err)
	}
	if len(tc.OwnerReferences) != 1 || tc.OwnerReferences[0].Kind != "Cluster" || tc.OwnerReferences[0].UID != cluster.UID {
		t.Fatalf("the TerraformCluster's owners = %+v, want the Cluster that Cluster API made its owner", tc.OwnerReferences)
	}
}

// A MachineDeployment whose machines use a TerraformMachineTemplate: Cluster API clones a
// TerraformMachine per Machine, captf applies each with the Machine's bootstrap data and name,
// and Cluster API copies each provider ID to its Machine.
func TestAMachineDeploymentGetsItsMachinesFromCaptf(t *testing.T) {
	s := system.NewSuite(t, "capi-md")
	ctx := context.Background()
	createCluster(t, s, "web")
	tmpl := &infrav1.TerraformMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "web-md-0", Namespace: s.NS}}
	tmpl.Spec.Template.Spec.Source.Image = system.SampleNoopImage
	tmpl.Spec.Template.Spec.Variables = &apiextensionsv1.JSON{Raw: []byte(`{"name":"web-md-0"}`)}
	if err := s.C.Create(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	// No bootstrap provider runs here: the data Secret a bootstrap provider would write.
	bootstrap := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "web-md-0-bootstrap", Namespace: s.NS},
		Type: clusterv1.ClusterSecretType, StringData: map[string]string{"value": "#cloud-config\n", "format": "cloud-config"}}
	if err := s.C.Create(ctx, bootstrap); err != nil {
		t.Fatal(err)
	}
	md := &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web-md-0", Namespace: s.NS},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: "web", Replicas: ptr.To[int32](2),
			Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{
				ClusterName: "web", Version: "v1.37.2",
				Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To(bootstrap.Name)},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "TerraformMachineTemplate", Name: tmpl.Name},
			}},
		},
	}
	if err := s.C.Create(ctx, md); err != nil {
		t.Fatal(err)
	}
	s.Eventually("both Machines get their provider IDs from captf", 4*time.Minute, func(ctx context.Context) (bool, error) {
		var machines clusterv1.MachineList
		if err := s.C.List(ctx, &machines, client.InNamespace(s.NS)); err != nil {
			return false, err
		}
		ids := map[string]bool{}
		for _, m := range machines.Items {
			if m.Spec.ProviderID != "local://"+m.Name {
				return false, nil
			}
			ids[m.Spec.ProviderID] = true
		}
		return len(ids) == 2, nil
	})
}

// createCluster creates a TerraformCluster on the sample module and the Cluster whose
// infrastructure it is, as a user (or clusterctl's template) would.
func createCluster(t *testing.T, s *system.Suite, name string) (*infrav1.TerraformCluster, *clusterv1.Cluster) {
	t.Helper()
	tc := &infrav1.TerraformCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.NS},
		Spec: infrav1.TerraformClusterSpec{
			WorkspaceSpec: infrav1.WorkspaceSpec{Source: infrav1.SourceSpec{Image: system.SampleNoopImage}, Variables: &apiextensionsv1.JSON{Raw: []byte(fmt.Sprintf(`{"name":%q}`, name))}},
			Drift:         infrav1.DriftSpec{IntervalSeconds: ptr.To[int64](0)},
		},
	}
	if err := s.C.Create(s.Ctx, tc); err != nil {
		t.Fatal(err)
	}
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.NS},
		Spec: clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: infrav1.GroupVersion.Group, Kind: infrav1.ClusterKind.Kind, Name: tc.Name,
		}},
	}
	if err := s.C.Create(s.Ctx, cluster); err != nil {
		t.Fatal(err)
	}
	return tc, cluster
}

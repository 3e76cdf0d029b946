// Package artifacts holds no code: its tests check the shipped manifests against the rules
// Cluster API and clusterctl apply to a provider's objects.
package artifacts

import (
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	hackmanifest "github.com/captf/captf/hack/manifest"
)

// ProviderLabel marks every object of the provider's components, as clusterctl requires.
const (
	ProviderLabel = "cluster.x-k8s.io/provider"
	ProviderName  = "infrastructure-terraform"
	// ContractLabel maps the Cluster API contract to the CRD's versions that implement it.
	ContractLabel = "cluster.x-k8s.io/v1beta2"
)

// Overlays are the installs: each renders every object the provider ships.
var Overlays = []string{"overlays/self-managed", "overlays/cert-manager"}

type manifest struct {
	file string
	obj  *unstructured.Unstructured
}

// readManifests renders every install overlay; file names the overlay an object came from.
func readManifests(t *testing.T) []manifest {
	t.Helper()
	var all []manifest
	for _, overlay := range Overlays {
		objs, err := hackmanifest.Kustomize(overlay)
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range objs {
			all = append(all, manifest{file: overlay, obj: obj})
		}
	}
	if len(all) == 0 {
		t.Fatal("no manifests found")
	}
	return all
}

func TestEveryShippedObjectCarriesTheProviderLabel(t *testing.T) {
	for _, m := range readManifests(t) {
		if got := m.obj.GetLabels()[ProviderLabel]; got != ProviderName {
			t.Errorf("%s: %s %s has %s=%q, want %q", m.file, m.obj.GetKind(), m.obj.GetName(), ProviderLabel, got, ProviderName)
		}
	}
}

// TestEveryCRDCarriesTheContractLabel checks the label Cluster API reads to find the CRD's
// versions that implement its contract: the served versions, joined by "_".
func TestEveryCRDCarriesTheContractLabel(t *testing.T) {
	crds := 0
	for _, m := range readManifests(t) {
		if m.obj.GetKind() != "CustomResourceDefinition" {
			continue
		}
		crds++
		var crd apiextensionsv1.CustomResourceDefinition
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m.obj.Object, &crd); err != nil {
			t.Fatalf("%s: %v", m.file, err)
		}
		var served []string
		for _, v := range crd.Spec.Versions {
			if v.Served {
				served = append(served, v.Name)
			}
		}
		slices.Sort(served)
		if got, want := crd.Labels[ContractLabel], strings.Join(served, "_"); got != want {
			t.Errorf("%s: %s=%q, want %q", crd.Name, ContractLabel, got, want)
		}
		// clusterctl finds a kind's CRD by <plural>.<group>.
		if want := crd.Spec.Names.Plural + "." + crd.Spec.Group; crd.Name != want {
			t.Errorf("CRD %s is not named %s", crd.Name, want)
		}
	}
	if crds == 0 {
		t.Fatal("no CRDs found")
	}
}

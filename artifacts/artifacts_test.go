// Package artifacts holds no code: its tests check the shipped manifests against the rules
// Cluster API and clusterctl apply to a provider's objects.
package artifacts

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// ProviderLabel marks every object of the provider's components, as clusterctl requires.
const (
	ProviderLabel = "cluster.x-k8s.io/provider"
	ProviderName  = "infrastructure-terraform"
	// ContractLabel maps the Cluster API contract to the CRD's versions that implement it.
	ContractLabel = "cluster.x-k8s.io/v1beta2"
)

// shipped are the manifests installed with the provider; samples are the user's objects.
var shipped = []string{"crd", "controller", "apiserver", "certmanager"}

type manifest struct {
	file string
	obj  unstructured.Unstructured
	raw  []byte
}

func readManifests(t *testing.T) []manifest {
	t.Helper()
	var all []manifest
	for _, dir := range shipped {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".yaml") && !strings.HasSuffix(e.Name(), ".yaml.in") {
				continue
			}
			file := filepath.Join(dir, e.Name())
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
			for {
				doc, err := reader.Read()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("%s: %v", file, err)
				}
				var obj unstructured.Unstructured
				if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
					t.Fatalf("%s: %v", file, err)
				}
				if obj.Object == nil {
					continue // a document of comments only
				}
				all = append(all, manifest{file: file, obj: obj, raw: doc})
			}
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
		if err := yaml.Unmarshal(m.raw, &crd); err != nil {
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

package testenv

import (
	"slices"
	"testing"
)

// The kubeadm bootstrap provider's CRDs carry the contract labels its install gives them, so
// Cluster API core resolves a Machine's bootstrap.configRef to their v1beta2.
func TestKubeadmBootstrapCRDsCarryTheContractLabels(t *testing.T) {
	crds, err := KubeadmBootstrapCRDs()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, crd := range crds {
		names = append(names, crd.Name)
		if !slices.Contains(KubeadmBootstrapGroups, crd.Spec.Group) {
			t.Errorf("%s: group %s is not one the provider converts", crd.Name, crd.Spec.Group)
		}
		for label, version := range map[string]string{"cluster.x-k8s.io/v1beta1": "v1beta1", "cluster.x-k8s.io/v1beta2": "v1beta2"} {
			if crd.Labels[label] != version {
				t.Errorf("%s: label %s = %q, want %q", crd.Name, label, crd.Labels[label], version)
			}
		}
	}
	slices.Sort(names)
	want := []string{"kubeadmconfigs.bootstrap.cluster.x-k8s.io", "kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io"}
	if !slices.Equal(names, want) {
		t.Fatalf("CRDs %v, want %v", names, want)
	}
}

package testenv

import (
	"fmt"
	"os"
	"path/filepath"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/captf/captf/hack/clusterctl/repo"
)

// ClusterAPIModule is the Cluster API release whose CRDs the control plane installs, so the
// controller finds the Clusters, Machines and MachinePools it reads.
const ClusterAPIModule = repo.ClusterAPIModulePath + "@" + repo.ClusterAPIVersion

// The API groups whose CRDs each Cluster API manager converts between versions: its webhook
// server answers /convert for them, and for no other group.
var (
	ClusterAPICoreGroups   = []string{"cluster.x-k8s.io", "addons.cluster.x-k8s.io", "ipam.cluster.x-k8s.io", "runtime.cluster.x-k8s.io"}
	KubeadmBootstrapGroups = []string{"bootstrap.cluster.x-k8s.io"}
)

// kubeadmBootstrapCRDsPath is where the module keeps the kubeadm bootstrap provider's CRDs.
var kubeadmBootstrapCRDsPath = filepath.Join("bootstrap", "kubeadm", "config", "crd", "bases")

// contractLabels are the labels the kubeadm bootstrap provider's kustomization
// (bootstrap/kubeadm/config/crd/kustomization.yaml) puts on its CRDs: which of their versions
// implements each Cluster API contract. Cluster API core and its topology controller read them
// to resolve an apiGroup and kind reference (a Machine's bootstrap.configRef) to a version;
// without them the reference does not resolve.
var contractLabels = map[string]string{
	"cluster.x-k8s.io/v1beta1": "v1beta1",
	"cluster.x-k8s.io/v1beta2": "v1beta2",
}

// clusterAPICRDs are the CRDs of the kinds captf reads, in the module's core/config/crd/bases.
var clusterAPICRDs = []string{
	"cluster.x-k8s.io_clusters.yaml",
	"cluster.x-k8s.io_machines.yaml",
	"cluster.x-k8s.io_machinepools.yaml",
}

// ClusterAPIDir returns where the Cluster API module is in the module cache; the Go command
// downloads it from the module proxy when the cache lacks it.
func ClusterAPIDir() (string, error) {
	return repo.ModuleDir(ClusterAPIModule)
}

// ClusterAPICRDs returns the paths of the Cluster API CRDs captf reads; with core, every CRD
// of Cluster API's core manager, which it needs to run.
func ClusterAPICRDs(core bool) ([]string, error) {
	dir, err := ClusterAPIDir()
	if err != nil {
		return nil, err
	}
	bases := filepath.Join(dir, "core", "config", "crd", "bases")
	if core {
		return []string{bases}, nil
	}
	var paths []string
	for _, name := range clusterAPICRDs {
		path := filepath.Join(bases, name)
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("the CRD %s: %w", name, err)
		}
		paths = append(paths, path)
	}
	return paths, nil
}

// KubeadmBootstrapCRDs returns the CRDs of Cluster API's kubeadm bootstrap provider
// (KubeadmConfig, KubeadmConfigTemplate) from the module, with the contract labels its
// install gives them: the module keeps them as plain files and adds the labels in kustomize.
func KubeadmBootstrapCRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	dir, err := ClusterAPIDir()
	if err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(dir, kubeadmBootstrapCRDsPath, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no CRDs in %s", filepath.Join(dir, kubeadmBootstrapCRDsPath))
	}
	objs, err := ReadManifests(files...)
	if err != nil {
		return nil, err
	}
	crds := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(objs))
	for _, obj := range objs {
		labels := obj.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		for k, v := range contractLabels {
			labels[k] = v
		}
		obj.SetLabels(labels)
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, crd); err != nil {
			return nil, fmt.Errorf("reading the CRD %s: %w", obj.GetName(), err)
		}
		crds = append(crds, crd)
	}
	return crds, nil
}

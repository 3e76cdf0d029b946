// Package repo assembles captf's clusterctl provider repository from the manifests in
// artifacts/: the components file clusterctl installs, metadata.yaml and the cluster templates,
// laid out as clusterctl reads a local repository (<root>/infrastructure-terraform/<version>/).
package repo

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/captf/captf/hack/manifest"
)

const (
	// ProviderName is the name clusterctl knows the provider by.
	ProviderName = "terraform"
	// ProviderType is clusterctl's kind of provider.
	ProviderType = "InfrastructureProvider"
	// ProviderLabelKey is the label that marks every object of the components.
	ProviderLabelKey = "cluster.x-k8s.io/provider"
	// ProviderLabel is its value: the provider's type and name.
	ProviderLabel = "infrastructure-terraform"
	// Version is the release the repository holds; its series is in metadata.yaml.
	Version = "v0.1.0"
	// Namespace is where the components run.
	Namespace = "captf-system"

	// ComponentsFile is the asset clusterctl init installs.
	ComponentsFile = "infrastructure-components.yaml"
	// MetadataFile maps the release series to Cluster API contracts.
	MetadataFile = "metadata.yaml"
	// ClusterTemplateFile is the template clusterctl generate cluster renders.
	ClusterTemplateFile = "cluster-template.yaml"

	// ImageRepository holds captf's images.
	ImageRepository = manifest.DevRepository

	// Overlay is the install, under artifacts/, that the components are: the cert-manager one,
	// since clusterctl installs cert-manager with Cluster API.
	Overlay = "overlays/cert-manager"
)

// clusterScoped are the kinds of the components that live outside any namespace.
var clusterScoped = []string{
	"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "APIService",
	"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "ValidatingAdmissionPolicy",
	"ValidatingAdmissionPolicyBinding",
}

// Dir is where a local repository under root keeps the assets of Version.
func Dir(root string) string {
	return filepath.Join(root, ProviderLabel, Version)
}

// Config is a clusterctl configuration file that names the local repository under root as the
// terraform infrastructure provider.
func Config(root string) string {
	return fmt.Sprintf("providers:\n- name: %s\n  type: %s\n  url: file://%s\n", ProviderName, ProviderType,
		filepath.Join(Dir(root), ComponentsFile))
}

// Write assembles the repository from the artifacts directory into root and returns the
// directory it wrote the assets to.
func Write(artifacts, root string) (string, error) {
	components, err := Components(artifacts)
	if err != nil {
		return "", err
	}
	dir := Dir(root)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, ComponentsFile), components, 0o644); err != nil {
		return "", err
	}
	for _, name := range []string{MetadataFile, ClusterTemplateFile} {
		data, err := os.ReadFile(filepath.Join(artifacts, "clusterctl", name))
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// Components renders the components file: the cert-manager install overlay, one Namespace,
// every object labelled for the provider, captf's images pinned to the release.
func Components(artifacts string) ([]byte, error) {
	objs, err := manifest.Kustomize(filepath.Join(artifacts, Overlay))
	if err != nil {
		return nil, err
	}
	namespaces := 0
	for _, obj := range objs {
		if obj.GetKind() == "Namespace" {
			if obj.GetName() != Namespace {
				return nil, fmt.Errorf("the Namespace %q: the components run in %s only", obj.GetName(), Namespace)
			}
			// clusterctl takes the components' one Namespace as the provider's.
			if namespaces++; namespaces > 1 {
				return nil, fmt.Errorf("a second Namespace %q: clusterctl takes one as the provider's", obj.GetName())
			}
		}
		if err := fit(obj); err != nil {
			return nil, err
		}
	}
	if namespaces == 0 {
		return nil, fmt.Errorf("no Namespace %s among the manifests", Namespace)
	}
	return encode(objs)
}

// fit applies clusterctl's rules for a provider's objects to one object.
func fit(obj *unstructured.Unstructured) error {
	namespaced := !slices.Contains(clusterScoped, obj.GetKind())
	if namespaced && obj.GetNamespace() != Namespace {
		return fmt.Errorf("%s %s/%s: clusterctl moves every namespaced object into the provider's namespace %s",
			obj.GetKind(), obj.GetNamespace(), obj.GetName(), Namespace)
	}
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[ProviderLabelKey] = ProviderLabel
	obj.SetLabels(labels)
	if obj.GetKind() == "Deployment" {
		return manifest.PinImages(obj, ImageRepository, ImageRepository, Version)
	}
	return nil
}

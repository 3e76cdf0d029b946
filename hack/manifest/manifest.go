// Package manifest reads Kubernetes objects from multi-document YAML, as kubectl apply -f does:
// documents of comments only are skipped, and numbers decode as integers where they are.
package manifest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Decode returns the objects of a multi-document YAML stream, in order.
func Decode(data []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for n := 1; ; n++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := utilyaml.Unmarshal(doc, &obj.Object); err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
}

// ReadFiles returns the objects of the files, in order.
func ReadFiles(paths ...string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		read, err := Decode(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		objs = append(objs, read...)
	}
	return objs, nil
}

// Kustomize renders the kustomization in dir, as `kubectl kustomize dir` does, and returns its
// objects in kustomize's order.
func Kustomize(dir string) ([]*unstructured.Unstructured, error) {
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	data, err := resources.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	return Decode(data)
}

// Images of artifacts/: <DevRepository>captf-<component>:<DevTag>.
const (
	DevRepository = "ghcr.io/captf/"
	DevTag        = "dev"
)

// PinImages renames captf's images in a Deployment's containers, and the environment values
// that name them (the runner image the controller gives its Jobs): each
// <from>captf-<component>:dev becomes <to>captf-<component>:<version>. Other objects and
// images are left alone.
func PinImages(obj *unstructured.Unstructured, from, to, version string) error {
	if obj.GetKind() != "Deployment" {
		return nil
	}
	pin := func(ref string) string {
		if rest, ok := strings.CutPrefix(ref, from); ok {
			if name, ok := strings.CutSuffix(rest, ":"+DevTag); ok && !strings.Contains(name, "/") {
				return to + name + ":" + version
			}
		}
		return ref
	}
	containers, _, err := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
	if err != nil {
		return fmt.Errorf("Deployment %s: %w", obj.GetName(), err)
	}
	for _, c := range containers {
		container, ok := c.(map[string]any)
		if !ok {
			continue
		}
		if image, ok := container["image"].(string); ok {
			container["image"] = pin(image)
		}
		env, _ := container["env"].([]any)
		for _, e := range env {
			if v, ok := e.(map[string]any); ok {
				if value, ok := v["value"].(string); ok {
					v["value"] = pin(value)
				}
			}
		}
	}
	return unstructured.SetNestedSlice(obj.Object, containers, "spec", "template", "spec", "containers")
}

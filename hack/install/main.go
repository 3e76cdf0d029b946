// Command install renders captf's install for a real cluster: an overlay of artifacts/ with
// captf's images renamed to the registry and version they were pushed as (make images
// REGISTRY=… VERSION=…), as one YAML stream for `kubectl apply --server-side -f`.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"

	"github.com/captf/captf/hack/manifest"
)

func main() {
	artifacts := flag.String("artifacts", "artifacts", "the artifacts directory")
	overlay := flag.String("overlay", "self-managed", "the install: self-managed or cert-manager")
	repository := flag.String("repository", manifest.DevRepository, "the prefix of the images' names, e.g. registry.example.com/captf/")
	version := flag.String("version", manifest.DevTag, "the images' tag")
	out := flag.String("out", "-", "the file to write; - for standard output")
	flag.Parse()
	data, err := render(*artifacts, *overlay, *repository, *version)
	if err == nil {
		if *out == "-" {
			_, err = os.Stdout.Write(data)
		} else {
			err = os.WriteFile(*out, data, 0o644)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "install:", err)
		os.Exit(1)
	}
}

// render returns the overlay's objects with captf's images named <repository>captf-<x>:<version>.
func render(artifacts, overlay, repository, version string) ([]byte, error) {
	objs, err := manifest.Kustomize(filepath.Join(artifacts, "overlays", overlay))
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	for _, obj := range objs {
		if err := manifest.PinImages(obj, manifest.DevRepository, repository, version); err != nil {
			return nil, err
		}
		data, err := yaml.Marshal(obj.Object)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
		if buf.Len() > 0 {
			buf.WriteString("---\n")
		}
		buf.Write(data)
	}
	return buf.Bytes(), nil
}

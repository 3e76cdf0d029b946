// Command images builds captf's container images from the source tree, without a container
// runtime: static binaries of the controller, the runner and the API server on the base layer
// of package image, written to an OCI image layout.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/captf/captf/hack/images/image"
)

func main() {
	out := flag.String("out", "dist/images", "the OCI image layout to write")
	version := flag.String("version", "dev", "the images' tag and version label")
	repository := flag.String("repository", "ghcr.io/captf/", "the prefix of the images' names")
	source := flag.String("source", "https://github.com/captf/captf", "the source label")
	flag.Parse()
	if err := run(context.Background(), *out, *repository, *version, *source); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out, repository, version, source string) error {
	bin, err := os.MkdirTemp("", "captf-images-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)
	// Static and reproducible: no cgo, no paths of this machine, no build ID.
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w -buildid=", "-o", bin+"/",
		"./cmd/controller", "./cmd/runner", "./cmd/apiserver")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building the binaries: %w", err)
	}
	base, err := image.BaseLayer()
	if err != nil {
		return err
	}
	specs := map[string]image.Spec{
		repository + "captf-manager:" + version: {
			Files:      map[string]string{"/controller": filepath.Join(bin, "controller"), "/runner": filepath.Join(bin, "runner")},
			Entrypoint: []string{"/controller"},
		},
		repository + "captf-apiserver:" + version: {
			Files:      map[string]string{"/apiserver": filepath.Join(bin, "apiserver")},
			Entrypoint: []string{"/apiserver"},
		},
	}
	images := map[string]v1.Image{}
	for ref, spec := range specs {
		spec.Version, spec.Source = version, source
		img, err := image.Build(base, spec)
		if err != nil {
			return fmt.Errorf("%s: %w", ref, err)
		}
		digest, err := img.Digest()
		if err != nil {
			return err
		}
		fmt.Printf("%s@%s\n", ref, digest)
		images[ref] = img
	}
	return image.WriteLayout(out, images)
}

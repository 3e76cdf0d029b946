// Command images builds captf's container images from the source tree, without a container
// runtime (package build): the manager, the API server and the sample module image, written to
// an OCI image layout and, with -registry, pushed to a registry.
package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/captf/captf/hack/images/build"
	"github.com/captf/captf/hack/images/image"
)

func main() {
	out := flag.String("out", "dist/images", "the OCI image layout to write")
	version := flag.String("version", "dev", "the images' tag and version label")
	repository := flag.String("repository", "ghcr.io/captf/", "the prefix of the images' names")
	source := flag.String("source", "https://github.com/captf/captf", "the source label")
	registry := flag.String("registry", "", "also push every image to this registry, as host:port[/prefix]/captf-<name>:<version> (plain HTTP on loopback)")
	flag.Parse()
	err := run(context.Background(), *out, *registry, build.Options{
		Repository: *repository, Version: *version, Source: *source, RepoRoot: ".", BuildOutput: os.Stderr,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out, registry string, opts build.Options) error {
	images, err := build.Images(ctx, opts)
	if err != nil {
		return err
	}
	for _, ref := range slices.Sorted(maps.Keys(images)) {
		digest, err := images[ref].Digest()
		if err != nil {
			return err
		}
		fmt.Printf("%s@%s\n", ref, digest)
	}
	if err := image.WriteLayout(out, images); err != nil {
		return err
	}
	if registry == "" {
		return nil
	}
	pushed := image.Retag(images, strings.TrimSuffix(registry, "/")+"/")
	if err := image.Push(ctx, pushed); err != nil {
		return err
	}
	for _, ref := range slices.Sorted(maps.Keys(pushed)) {
		fmt.Printf("pushed %s\n", ref)
	}
	return nil
}

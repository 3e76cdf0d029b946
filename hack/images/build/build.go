// Package build builds captf's container images from the source tree, in process: the manager
// image, the API server image and the sample module image, each on the base layer of package
// image. Command hack/images writes them to an OCI layout and pushes them; a test harness can
// call Images and Push itself, with binaries it built once and keeps.
package build

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/captf/captf/hack/images/image"
)

// The images, by name: a reference is <repository prefix><name>:<version>.
const (
	// Manager holds /controller and /runner; the controller's Jobs copy the runner out of it.
	Manager = "captf-manager"
	// APIServer holds /apiserver.
	APIServer = "captf-apiserver"
	// SampleNoop is the sample module image: artifacts/samples/modules/noop at /captf/module and
	// OpenTofu at /captf/runtime, the layout the runner expects.
	SampleNoop = "captf-sample-noop"
	// SampleMachine is the sample machine module's image: artifacts/samples/modules/machine at
	// /captf/module with its lock file, OpenTofu at /captf/runtime, and the providers it needs
	// in the provider mirror at /captf/providers, from which the runner installs them.
	SampleMachine = "captf-sample-machine"
)

// The static binaries the images hold, by the names Options.Binaries and BuildBinaries use.
const (
	Controller      = "controller"
	Runner          = "runner"
	APIServerBinary = "apiserver"
	Tofu            = "tofu"
)

// Paths inside a module image, as the runner reads them (runner.DefaultModule, DefaultBin).
const (
	ModulePath    = "/captf/module"
	RuntimePath   = "/captf/runtime"
	ProvidersPath = "/captf/providers"
)

// The sample modules' directories, relative to the repository root.
const (
	SampleModuleDir        = "artifacts/samples/modules/noop"
	SampleMachineModuleDir = "artifacts/samples/modules/machine"
)

// tofuLDFlags are the Makefile's OpenTofu flags, so that the image's OpenTofu reports the
// release version as bin/tofu does, less the build ID, which changes with the build machine.
const tofuLDFlags = "-s -w -buildid= -X github.com/opentofu/opentofu/version.dev=no"

// Names lists every image, in build order.
var Names = []string{Manager, APIServer, SampleNoop, SampleMachine}

// binariesOf are the binaries each image needs.
var binariesOf = map[string][]string{
	Manager:       {Controller, Runner},
	APIServer:     {APIServerBinary},
	SampleNoop:    {Tofu},
	SampleMachine: {Tofu},
}

// Options say which images to build and how to name them.
type Options struct {
	// Repository prefixes every image name: "ghcr.io/captf/", or "127.0.0.1:5000/" for a local
	// registry. A reference is Ref(Repository, name, Version).
	Repository string
	// Version is the tag and the org.opencontainers.image.version label.
	Version string
	// Source is the org.opencontainers.image.source label.
	Source string
	// RepoRoot is the root of the captf source tree. Required.
	RepoRoot string
	// Names are the images to build; empty means all of Names.
	Names []string
	// Binaries maps a binary name (Controller, Runner, APIServerBinary, Tofu) to a static
	// linux/amd64 binary built beforehand, e.g. by BuildBinaries into a cache; the images use
	// it as it is. The binaries not given are built into a temporary directory.
	Binaries map[string]string
	// BuildOutput receives the output of go build. Defaults to discarding it.
	BuildOutput io.Writer
	// ProviderMirror is the unpacked provider mirror SampleMachine carries, as `make tools`
	// builds it. Defaults to <RepoRoot>/bin/providers.
	ProviderMirror string
}

// Ref is the reference of the image name built with repository and version.
func Ref(repository, name, version string) string {
	return repository + name + ":" + version
}

// Images builds the images opts names, by reference. The same sources and binaries give the
// same digests.
func Images(ctx context.Context, opts Options) (map[string]v1.Image, error) {
	if opts.RepoRoot == "" {
		return nil, errors.New("build: RepoRoot is required")
	}
	names := opts.Names
	if len(names) == 0 {
		names = Names
	}
	bins := map[string]string{}
	var missing []string
	for _, name := range names {
		need, ok := binariesOf[name]
		if !ok {
			return nil, fmt.Errorf("build: no image is named %q", name)
		}
		for _, b := range need {
			if p, given := opts.Binaries[b]; given {
				if err := checkStatic(p); err != nil {
					return nil, fmt.Errorf("build: binary %s: %w", b, err)
				}
				bins[b] = p
			} else if !slices.Contains(missing, b) {
				missing = append(missing, b)
			}
		}
	}
	if len(missing) > 0 {
		dir, err := os.MkdirTemp("", "captf-images-")
		if err != nil {
			return nil, fmt.Errorf("build: %w", err)
		}
		defer os.RemoveAll(dir)
		built, err := buildBinaries(ctx, opts.RepoRoot, dir, opts.BuildOutput, missing)
		if err != nil {
			return nil, err
		}
		maps.Copy(bins, built)
	}

	base, err := image.BaseLayer()
	if err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	specs := map[string]image.Spec{
		Manager: {
			Files:      map[string]string{"/controller": bins[Controller], "/runner": bins[Runner]},
			Entrypoint: []string{"/controller"},
		},
		APIServer: {
			Files:      map[string]string{"/apiserver": bins[APIServerBinary]},
			Entrypoint: []string{"/apiserver"},
		},
		SampleNoop:    moduleSpec(filepath.Join(opts.RepoRoot, SampleModuleDir), bins[Tofu]),
		SampleMachine: moduleSpec(filepath.Join(opts.RepoRoot, SampleMachineModuleDir), bins[Tofu]),
	}
	if slices.Contains(names, SampleMachine) {
		mirror := opts.ProviderMirror
		if mirror == "" {
			mirror = filepath.Join(opts.RepoRoot, "bin", "providers")
		}
		if info, err := os.Stat(mirror); err != nil || !info.IsDir() {
			return nil, fmt.Errorf("build: %s needs the provider mirror %s (make tools builds it)", SampleMachine, mirror)
		}
		specs[SampleMachine].Dirs[ProvidersPath] = mirror
	}
	out := map[string]v1.Image{}
	for _, name := range names {
		spec := specs[name]
		spec.Version, spec.Source = opts.Version, opts.Source
		img, err := image.Build(base, spec)
		if err != nil {
			return nil, fmt.Errorf("build: %s: %w", name, err)
		}
		out[Ref(opts.Repository, name, opts.Version)] = img
	}
	return out, nil
}

// ModuleImage builds a module image like SampleNoop's for another module: the directory
// moduleDir at ModulePath and the static OpenTofu binary tofu at RuntimePath, on the base
// layer, labelled with version and source.
func ModuleImage(moduleDir, tofu, version, source string) (v1.Image, error) {
	if err := checkStatic(tofu); err != nil {
		return nil, fmt.Errorf("build: OpenTofu: %w", err)
	}
	base, err := image.BaseLayer()
	if err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	spec := moduleSpec(moduleDir, tofu)
	spec.Version, spec.Source = version, source
	img, err := image.Build(base, spec)
	if err != nil {
		return nil, fmt.Errorf("build: module image of %s: %w", moduleDir, err)
	}
	return img, nil
}

func moduleSpec(moduleDir, tofu string) image.Spec {
	return image.Spec{
		Dirs:       map[string]string{ModulePath: moduleDir},
		Files:      map[string]string{RuntimePath: tofu},
		Entrypoint: []string{RuntimePath},
	}
}

// BuildBinaries builds the named binaries (all four when none are named) as static,
// reproducible linux/amd64 executables into dir and returns their paths by name, for
// Options.Binaries. The captf binaries take seconds with a warm Go build cache; OpenTofu, from
// hack/tools/tofu, takes minutes the first time.
func BuildBinaries(ctx context.Context, repoRoot, dir string, names ...string) (map[string]string, error) {
	if len(names) == 0 {
		names = []string{Controller, Runner, APIServerBinary, Tofu}
	}
	return buildBinaries(ctx, repoRoot, dir, nil, names)
}

func buildBinaries(ctx context.Context, repoRoot, dir string, output io.Writer, names []string) (map[string]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	out := map[string]string{}
	var captf []string
	for _, name := range names {
		switch name {
		case Controller, Runner, APIServerBinary:
			captf = append(captf, "./cmd/"+name)
		case Tofu:
		default:
			return nil, fmt.Errorf("build: no binary is named %q", name)
		}
		out[name] = filepath.Join(dir, name)
	}
	if len(captf) > 0 {
		args := append([]string{"build", "-trimpath", "-ldflags=-s -w -buildid=", "-o", dir + string(filepath.Separator)}, captf...)
		if err := goBuild(ctx, repoRoot, output, args...); err != nil {
			return nil, err
		}
	}
	if _, ok := out[Tofu]; ok {
		err := goBuild(ctx, filepath.Join(repoRoot, "hack", "tools", "tofu"), output,
			"build", "-trimpath", "-ldflags="+tofuLDFlags, "-o", out[Tofu], "github.com/opentofu/opentofu/cmd/tofu")
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// goBuild runs go in dir for linux/amd64 without cgo: an image has no C library.
func goBuild(ctx context.Context, dir string, output io.Writer, args ...string) error {
	if output == nil {
		output = io.Discard
	}
	var stderr strings.Builder
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	cmd.Stdout = output
	cmd.Stderr = io.MultiWriter(output, &stderr)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build: go %s in %s: %w: %s", strings.Join(args, " "), dir, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// checkStatic fails for a dynamically linked ELF file, which could not run in an image without
// a C library. Other files (a script in a test) pass.
func checkStatic(p string) error {
	if _, err := os.Stat(p); err != nil {
		return err
	}
	f, err := elf.Open(p)
	if err != nil {
		return nil // not ELF
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked; build it with CGO_ENABLED=0 (BuildBinaries does)", p)
		}
	}
	return nil
}

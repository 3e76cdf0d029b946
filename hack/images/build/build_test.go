package build

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

const (
	testRepository = "registry.example/captf/"
	testVersion    = "v0.1.0"
	testSource     = "https://example.invalid/captf"
)

// repoRoot is the root of the source tree, three levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// fakeBinaries writes a stand-in for each binary, so that no test here waits for go build.
func fakeBinaries(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	out := map[string]string{}
	for _, name := range []string{Controller, Runner, APIServerBinary, Tofu} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!"+name), 0o755); err != nil {
			t.Fatal(err)
		}
		out[name] = p
	}
	return out
}

// fakeProvider is the one provider of fakeMirror, at its path in a mirror.
const fakeProvider = "registry.opentofu.org/hashicorp/time/0.14.2/linux_amd64/terraform-provider-time_v0.14.2"

// fakeMirror is a provider mirror of one fake provider.
func fakeMirror(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, filepath.FromSlash(fakeProvider))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("#!provider"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func options(t *testing.T, names ...string) Options {
	t.Helper()
	return Options{Repository: testRepository, Version: testVersion, Source: testSource, RepoRoot: repoRoot(t), Names: names, Binaries: fakeBinaries(t), ProviderMirror: fakeMirror(t)}
}

func images(t *testing.T, opts Options) map[string]v1.Image {
	t.Helper()
	imgs, err := Images(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return imgs
}

// file is one entry of an image's file system, with its content.
type file struct {
	header *tar.Header
	data   []byte
}

// files reads the flattened file system of img.
func files(t *testing.T, img v1.Image) map[string]file {
	t.Helper()
	out := map[string]file{}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(h.Name, "/")] = file{header: h, data: data}
	}
}

func digest(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestEveryImageIsNamedRepositoryCaptfNameVersion(t *testing.T) {
	imgs := images(t, options(t))
	var refs []string
	for ref := range imgs {
		refs = append(refs, ref)
	}
	slices.Sort(refs)
	want := []string{
		testRepository + "captf-apiserver:" + testVersion,
		testRepository + "captf-manager:" + testVersion,
		testRepository + "captf-sample-machine:" + testVersion,
		testRepository + "captf-sample-noop:" + testVersion,
	}
	if !slices.Equal(refs, want) {
		t.Fatalf("references %v, want %v", refs, want)
	}
}

func TestTheSampleModuleImage(t *testing.T) {
	opts := options(t, SampleNoop)
	img := images(t, opts)[Ref(testRepository, SampleNoop, testVersion)]
	if img == nil {
		t.Fatal("no sample image")
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	fs := files(t, img)
	mainTF, err := os.ReadFile(filepath.Join(opts.RepoRoot, SampleModuleDir, "main.tf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, rule := range []struct {
		name string
		ok   bool
	}{
		{"the module is at /captf/module", fs["captf/module"].header != nil && fs["captf/module"].header.Typeflag == tar.TypeDir},
		{"the module's files are copied as they are", bytes.Equal(fs["captf/module/main.tf"].data, mainTF) && fs["captf/module/contract.tf"].header != nil},
		{"module files are readable, not executable", fs["captf/module/main.tf"].header != nil && fs["captf/module/main.tf"].header.Mode == 0o644},
		{"OpenTofu is the executable /captf/runtime", fs["captf/runtime"].header != nil && fs["captf/runtime"].header.Mode == 0o755 && string(fs["captf/runtime"].data) == "#!tofu"},
		{"the base layer is there", fs["etc/passwd"].header != nil && fs["etc/ssl/certs/ca-certificates.crt"].header != nil},
		{"the base and the module are separate layers", len(layers) == 2},
		{"runs as 65532", cfg.Config.User == "65532:65532"},
		{"the entrypoint is OpenTofu", slices.Equal(cfg.Config.Entrypoint, []string{RuntimePath})},
		{"labelled with version and source", cfg.Config.Labels["org.opencontainers.image.version"] == testVersion && cfg.Config.Labels["org.opencontainers.image.source"] == testSource},
	} {
		if !rule.ok {
			t.Errorf("%s: does not hold", rule.name)
		}
	}
}

func TestTheSameSourcesGiveTheSameDigests(t *testing.T) {
	opts := options(t)
	first := images(t, opts)
	second := images(t, opts)
	for ref, img := range first {
		if a, b := digest(t, img), digest(t, second[ref]); a != b {
			t.Errorf("%s: two builds gave %s and %s", ref, a, b)
		}
	}
	opts.Version = "v0.2.0"
	for ref, img := range images(t, opts) {
		old := first[strings.Replace(ref, "v0.2.0", testVersion, 1)]
		if digest(t, img) == digest(t, old) {
			t.Errorf("%s: another version label kept the digest", ref)
		}
	}
}

func TestModuleImageOfAnotherModule(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub", "main.tf"), []byte("# steps"), 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := ModuleImage(dir, fakeBinaries(t)[Tofu], testVersion, testSource)
	if err != nil {
		t.Fatal(err)
	}
	fs := files(t, img)
	if string(fs["captf/module/sub/main.tf"].data) != "# steps" || fs["captf/runtime"].header == nil {
		t.Errorf("module image files: %v", slices.Sorted(maps.Keys(fs)))
	}
}

func TestRefusals(t *testing.T) {
	dynamic := ""
	if sh, err := exec.LookPath("sh"); err == nil {
		if f, err := elf.Open(sh); err == nil {
			for _, p := range f.Progs {
				if p.Type == elf.PT_INTERP {
					dynamic = sh
				}
			}
			f.Close()
		}
	}
	for _, rule := range []struct {
		name string
		opts func(*testing.T, *Options)
	}{
		{"an unknown image name", func(_ *testing.T, o *Options) { o.Names = []string{"captf-nothing"} }},
		{"no repository root", func(_ *testing.T, o *Options) { o.RepoRoot = "" }},
		{"a given binary that does not exist", func(t *testing.T, o *Options) { o.Binaries[Tofu] = filepath.Join(t.TempDir(), "none") }},
		{"a dynamically linked binary", func(t *testing.T, o *Options) {
			if dynamic == "" {
				// CI's machine has a dynamically linked shell; elsewhere the rule may go untested.
				if os.Getenv("CI") == "true" {
					t.Fatal("no dynamically linked sh to test with")
				}
				t.Skip("no dynamically linked sh here")
			}
			o.Binaries[Tofu] = dynamic
		}},
	} {
		t.Run(rule.name, func(t *testing.T) {
			opts := options(t, SampleNoop)
			rule.opts(t, &opts)
			if _, err := Images(context.Background(), opts); err == nil {
				t.Error("Images succeeded")
			}
		})
	}
}

// Built binaries are static: an image has no C library.
func TestBuiltBinariesAreStatic(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/runner")
	}
	bins, err := BuildBinaries(context.Background(), repoRoot(t), t.TempDir(), Runner)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkStatic(bins[Runner]); err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(bins[Runner])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 {
		t.Errorf("machine %s, want x86-64", f.Machine)
	}
}

// The sample machine module's image carries its module with the lock file and, in the mirror
// the runner installs from, its providers.
func TestTheSampleMachineImage(t *testing.T) {
	opts := options(t, SampleMachine)
	img := images(t, opts)[Ref(testRepository, SampleMachine, testVersion)]
	if img == nil {
		t.Fatal("no sample machine image")
	}
	fs := files(t, img)
	lock, err := os.ReadFile(filepath.Join(opts.RepoRoot, SampleMachineModuleDir, ".terraform.lock.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	provider := fs["captf/providers/"+fakeProvider]
	for _, rule := range []struct {
		name string
		ok   bool
	}{
		{"the module is at /captf/module with its lock file", fs["captf/module/main.tf"].header != nil && bytes.Equal(fs["captf/module/.terraform.lock.hcl"].data, lock)},
		{"the providers are in the mirror at /captf/providers, executable", provider.header != nil && provider.header.Mode == 0o755 && string(provider.data) == "#!provider"},
		{"OpenTofu is the executable /captf/runtime", fs["captf/runtime"].header != nil && fs["captf/runtime"].header.Mode == 0o755},
	} {
		if !rule.ok {
			t.Errorf("%s: does not hold", rule.name)
		}
	}
}

// Without a provider mirror there is no machine image: one without providers would fail every
// run at init.
func TestTheSampleMachineImageNeedsTheMirror(t *testing.T) {
	opts := options(t, SampleMachine)
	opts.ProviderMirror = filepath.Join(t.TempDir(), "none")
	if _, err := Images(context.Background(), opts); err == nil || !strings.Contains(err.Error(), "make tools") {
		t.Fatalf("error %v, want one that says make tools builds the mirror", err)
	}
}

package image

import (
	"archive/tar"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

func build(t *testing.T, dir string) v1.Image {
	t.Helper()
	bin := filepath.Join(dir, "controller")
	if err := os.WriteFile(bin, []byte("#!binary"), 0o600); err != nil {
		t.Fatal(err)
	}
	base, err := BaseLayer()
	if err != nil {
		t.Fatal(err)
	}
	img, err := Build(base, Spec{Files: map[string]string{"/controller": bin, "/bin/runner": bin}, Entrypoint: []string{"/controller"}, Version: "v0.1.0", Source: "https://example.invalid/captf"})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// files reads the image's flattened file system.
func files(t *testing.T, img v1.Image) map[string]*tar.Header {
	t.Helper()
	out := map[string]*tar.Header{}
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
		out[strings.TrimSuffix(h.Name, "/")] = h
		if h.Name == "etc/ssl/certs/ca-certificates.crt" {
			data, _ := io.ReadAll(tr)
			pool := x509.NewCertPool()
			if block, _ := pem.Decode(data); block == nil || !pool.AppendCertsFromPEM(data) {
				t.Error("the CA bundle holds no certificate")
			}
		}
	}
}

func TestAnImageRunsItsBinariesAsTheNonRootUser(t *testing.T) {
	img := build(t, t.TempDir())
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	fs := files(t, img)
	for _, rule := range []struct {
		name string
		ok   bool
	}{
		{"runs as 65532", cfg.Config.User == "65532:65532"},
		{"the entrypoint is the binary", len(cfg.Config.Entrypoint) == 1 && cfg.Config.Entrypoint[0] == "/controller"},
		{"labelled with version and source", cfg.Config.Labels["org.opencontainers.image.version"] == "v0.1.0" && cfg.Config.Labels["org.opencontainers.image.source"] != ""},
		{"for linux/amd64", cfg.OS == "linux" && cfg.Architecture == "amd64"},
		{"the binaries are executable", fs["controller"] != nil && fs["controller"].Mode == 0o755 && fs["bin/runner"] != nil},
		{"the user has a passwd entry and a home", fs["etc/passwd"] != nil && fs["home/nonroot"] != nil && fs["home/nonroot"].Uid == User},
		{"the CA certificates are there", fs["etc/ssl/certs/ca-certificates.crt"] != nil},
		{"/tmp is writable", fs["tmp"] != nil && fs["tmp"].Mode&0o1777 == 0o1777},
		{"the base and the binaries are separate layers", func() bool { l, err := img.Layers(); return err == nil && len(l) == 2 }()},
	} {
		if !rule.ok {
			t.Errorf("%s: does not hold", rule.name)
		}
	}
}

func TestTheSameInputsGiveTheSameDigest(t *testing.T) {
	dir := t.TempDir()
	a, err := build(t, dir).Digest()
	if err != nil {
		t.Fatal(err)
	}
	b, err := build(t, dir).Digest()
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatalf("two builds: %s and %s", a, b)
	}
}

func TestTheLayoutNamesEachImage(t *testing.T) {
	dir := t.TempDir()
	img := build(t, dir)
	out := filepath.Join(dir, "oci")
	if err := WriteLayout(out, map[string]v1.Image{"ghcr.io/captf/captf-manager:v0.1.0": img}); err != nil {
		t.Fatal(err)
	}
	p, err := layout.FromPath(out)
	if err != nil {
		t.Fatal(err)
	}
	index, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	if len(manifest.Manifests) != 1 || manifest.Manifests[0].Annotations[RefNameAnnotation] != "ghcr.io/captf/captf-manager:v0.1.0" || manifest.Manifests[0].Digest != want {
		t.Fatalf("index = %+v", manifest.Manifests)
	}
}

func TestADirectoryIsCopiedWithItsTree(t *testing.T) {
	base, err := BaseLayer()
	if err != nil {
		t.Fatal(err)
	}
	for _, rule := range []struct {
		name  string
		setup func(dir string) error
		check func(fs map[string]*tar.Header) bool
		fails bool
	}{
		{"files keep their exec bit, dirs are 0755", func(dir string) error {
			if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o700); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, "sub", "run.sh"), nil, 0o700); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, "a.tf"), nil, 0o600)
		}, func(fs map[string]*tar.Header) bool {
			return fs["m/a.tf"].Mode == 0o644 && fs["m/sub/run.sh"].Mode == 0o755 && fs["m/sub"].Mode == 0o755 && fs["m"].Typeflag == tar.TypeDir
		}, false},
		{"a symlink to a file out of the tree is copied as the file", func(dir string) error {
			target := filepath.Join(filepath.Dir(dir), "shared.tf")
			if err := os.WriteFile(target, []byte("shared"), 0o644); err != nil {
				return err
			}
			return os.Symlink(target, filepath.Join(dir, "link.tf"))
		}, func(fs map[string]*tar.Header) bool {
			return fs["m/link.tf"] != nil && fs["m/link.tf"].Typeflag == tar.TypeReg && fs["m/link.tf"].Size == int64(len("shared"))
		}, false},
		{"a symlink to a directory is refused", func(dir string) error {
			return os.Symlink(os.TempDir(), filepath.Join(dir, "link"))
		}, nil, true},
	} {
		t.Run(rule.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := rule.setup(dir); err != nil {
				t.Fatal(err)
			}
			img, err := Build(base, Spec{Dirs: map[string]string{"/m": dir}})
			if rule.fails {
				if err == nil {
					t.Fatal("Build succeeded")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fs := files(t, img); !rule.check(fs) {
				t.Errorf("files: %v", fs)
			}
		})
	}
}

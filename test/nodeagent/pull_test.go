package nodeagent

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	ociregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
)

// testRegistryHost serves an in-memory registry on a loopback port for the test and returns its
// host:port.
func testRegistryHost(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(ociregistry.New(ociregistry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// push pushes img to ref and returns its digest.
func push(t *testing.T, ref string, img v1.Image) v1.Hash {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// versionImage is an image whose /version holds version, with an entrypoint and env.
func versionImage(t *testing.T, version string) v1.Image {
	t.Helper()
	img := testImage(t, testLayer(t, file("version", version)))
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.Config.Entrypoint = []string{"/bin/" + version}
	cfg.Config.Env = []string{"VERSION=" + version}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestPulledImagesAreUnpackedOncePerDigest(t *testing.T) {
	host := testRegistryHost(t)
	store := newImageStore(filepath.Join(t.TempDir(), "images"), nil)
	ctx := context.Background()
	pull := func(ref string) *pulledImage {
		t.Helper()
		p, err := store.pull(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	v1Digest := push(t, host+"/x:v1", versionImage(t, "v1"))
	first := pull(host + "/x:v1")
	// A file the unpacking would not leave there shows whether it happens again.
	marker := filepath.Join(first.rootfs, "marker")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	again := pull(host + "/x:v1")
	push(t, host+"/y:other", versionImage(t, "v1"))
	otherName := pull(host + "/y:other")
	v2Digest := push(t, host+"/x:v1", versionImage(t, "v2"))
	moved := pull(host + "/x:v1")
	old, oldPresent := store.present(host + "/x@" + v1Digest.String())
	_, neverPulled := store.present(host + "/x:never")

	for _, rule := range []struct {
		name string
		ok   bool
	}{
		{"the ID is the repository and the digest", first.id == host+"/x@"+v1Digest.String()},
		{"the file system holds the layers", readFile(filepath.Join(first.rootfs, "version")) == "v1"},
		{"the file system lives under the store by digest", strings.HasPrefix(first.rootfs, filepath.Join(store.dir, "sha256-"+v1Digest.Hex))},
		{"the configuration is the image's", len(first.config.Entrypoint) == 1 && first.config.Entrypoint[0] == "/bin/v1" && first.config.Env[0] == "VERSION=v1"},
		{"a second pull of a digest does not unpack again", again.rootfs == first.rootfs && exists(marker)},
		{"the same digest under another name shares the file system", otherName.rootfs == first.rootfs && otherName.id == host+"/y@"+v1Digest.String()},
		{"a moved tag resolves to the new digest", moved.id == host+"/x@"+v2Digest.String() && readFile(filepath.Join(moved.rootfs, "version")) == "v2"},
		{"the old digest is still present", oldPresent && old.rootfs == first.rootfs},
		{"the tag is present as last pulled", func() bool { p, ok := store.present(host + "/x:v1"); return ok && p == moved }()},
		{"a reference never pulled is not present", !neverPulled},
	} {
		if !rule.ok {
			t.Errorf("%s: does not hold", rule.name)
		}
	}
}

func TestAPullOfAMissingImageGivesTheRegistryError(t *testing.T) {
	host := testRegistryHost(t)
	store := newImageStore(t.TempDir(), nil)
	push(t, host+"/x:v1", versionImage(t, "v1"))
	for _, rule := range []struct{ name, ref, want string }{
		{"an unknown tag", host + "/x:v9", "MANIFEST_UNKNOWN"},
		{"an unknown repository", host + "/nothing:v1", "NAME_UNKNOWN"},
		{"an unknown digest", host + "/x@sha256:" + strings.Repeat("0", 64), "MANIFEST_UNKNOWN"},
		{"a registry that does not answer", "127.0.0.1:1/x:v1", "connection refused"},
	} {
		_, err := store.pull(context.Background(), rule.ref)
		if err == nil || !strings.Contains(err.Error(), rule.want) {
			t.Errorf("%s: error %v, want one with %q", rule.name, err, rule.want)
		}
	}
}

func TestPullPolicyDefaultsAsTheAPIServer(t *testing.T) {
	for _, rule := range []struct {
		name  string
		c     corev1.Container
		wants corev1.PullPolicy
	}{
		{"a set policy stays", corev1.Container{Image: "x:latest", ImagePullPolicy: corev1.PullNever}, corev1.PullNever},
		{"no tag pulls always", corev1.Container{Image: "127.0.0.1:5000/x"}, corev1.PullAlways},
		{"latest pulls always", corev1.Container{Image: "x:latest"}, corev1.PullAlways},
		{"a tag pulls if not present", corev1.Container{Image: "127.0.0.1:5000/x:v1"}, corev1.PullIfNotPresent},
		{"a digest pulls if not present", corev1.Container{Image: "x@sha256:" + strings.Repeat("a", 64)}, corev1.PullIfNotPresent},
	} {
		if got := pullPolicy(&rule.c); got != rule.wants {
			t.Errorf("%s: %s, want %s", rule.name, got, rule.wants)
		}
	}
}

// A registry mirror serves the repositories of its host under the same path; other hosts and
// references without a host are pulled as named.
func TestMirroredReference(t *testing.T) {
	mirrors := map[string]string{"ghcr.io": "127.0.0.1:5000"}
	for _, tc := range []struct{ ref, want string }{
		{"ghcr.io/captf/captf-manager:dev", "127.0.0.1:5000/captf/captf-manager:dev"},
		{"ghcr.io/captf/x@sha256:" + strings.Repeat("a", 64), "127.0.0.1:5000/captf/x@sha256:" + strings.Repeat("a", 64)},
		{"quay.io/captf/x:v1", "quay.io/captf/x:v1"},
		{"noop", "noop"},
	} {
		if got := mirrored(tc.ref, mirrors); got != tc.want {
			t.Errorf("mirrored(%q) = %q, want %q", tc.ref, got, tc.want)
		}
	}
}

package nodeagent

import (
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// The repository of a reference is what is left without its tag and digest; a registry host's
// port is not a tag.
func TestImageReferenceRepository(t *testing.T) {
	digest := "sha256:" + strings.Repeat("a", 64)
	for _, tc := range []struct{ ref, repo, tag, digest string }{
		{"captf-samples/noop:v1", "captf-samples/noop", "v1", ""},
		{"noop", "noop", "", ""},
		{"localhost:5000/x:tag", "localhost:5000/x", "tag", ""},
		{"localhost:5000/x", "localhost:5000/x", "", ""},
		{"localhost:5000/x@" + digest, "localhost:5000/x", "", digest},
		{"registry.example:443/a/b:v2@" + digest, "registry.example:443/a/b", "v2", digest},
	} {
		repo, tag, d := splitReference(tc.ref)
		if repo != tc.repo || tag != tc.tag || d != tc.digest {
			t.Errorf("splitReference(%q) = %q, %q, %q; want %q, %q, %q", tc.ref, repo, tag, d, tc.repo, tc.tag, tc.digest)
		}
	}
}

// A digest identifies a mapping's content: equal mappings (however their local paths are
// spelled) have equal digests, and a changed path or command changes it.
func TestImageDigestIsContentAddressed(t *testing.T) {
	digest := func(img Image) string {
		t.Helper()
		n, err := normalizeImage("x:v1", img)
		if err != nil {
			t.Fatal(err)
		}
		d := imageDigest(n)
		if !validDigest(d) {
			t.Fatalf("digest %q is not sha256:<64 hex>", d)
		}
		return d
	}
	base := digest(Image{Paths: map[string]string{"/a": "/local/a", "/b": "/local/b"}, Command: []string{"/a/run"}})
	if same := digest(Image{Paths: map[string]string{"/b/": "/local/x/../b", "/a": "/local/a"}, Command: []string{"/a/run"}}); same != base {
		t.Errorf("an equal mapping has digest %s, want %s", same, base)
	}
	for name, img := range map[string]Image{
		"another local path": {Paths: map[string]string{"/a": "/local/a2", "/b": "/local/b"}, Command: []string{"/a/run"}},
		"another image path": {Paths: map[string]string{"/a": "/local/a", "/c": "/local/b"}, Command: []string{"/a/run"}},
		"another command":    {Paths: map[string]string{"/a": "/local/a", "/b": "/local/b"}, Command: []string{"/a/run", "x"}},
		"no command":         {Paths: map[string]string{"/a": "/local/a", "/b": "/local/b"}},
	} {
		if d := digest(img); d == base {
			t.Errorf("%s: the digest did not change", name)
		}
	}
}

// Images are given by tag, in Config.Images and to PushImage: a digest is the agent's to
// compute, never a name to push.
func TestImagesAreGivenByTag(t *testing.T) {
	digestRef := "x@sha256:" + strings.Repeat("a", 64)
	cfg := Config{RESTConfig: &rest.Config{Host: "https://127.0.0.1:1"}, WorkDir: t.TempDir()}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.PushImage(digestRef, Image{Paths: map[string]string{"/x": "/x"}}); err == nil {
		t.Errorf("PushImage(%q) succeeded", digestRef)
	}
	if _, err := a.PushImage("x:v1", Image{Paths: map[string]string{"relative": "/x"}}); err == nil {
		t.Error("PushImage with a relative path inside the image succeeded")
	}
	if _, err := a.ImageDigest("x:v1"); err == nil {
		t.Error("a failed push left x:v1 known")
	}
	cfg.Images = map[string]Image{digestRef: {Paths: map[string]string{"/x": "/x"}}}
	if _, err := New(cfg); err == nil {
		t.Errorf("New accepted %q in Config.Images", digestRef)
	}
}

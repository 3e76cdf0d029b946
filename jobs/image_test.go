package jobs

import (
	"strings"
	"testing"
)

var digestA = "sha256:" + strings.Repeat("a", 64)

func TestDigestOf(t *testing.T) {
	for _, tc := range []struct {
		rule, imageID, want string
	}{
		{"a repository digest is read after the @", "registry.example/modules/net@" + digestA, digestA},
		{"a runtime prefix is passed over", "docker-pullable://net@" + digestA, digestA},
		{"a bare configuration digest is no pullable digest", digestA, ""},
		{"an imageID without digest has none", "local-process://net:v1", ""},
		{"a short digest is none", "net@sha256:abc", ""},
		{"upper-case hex is none", "net@sha256:" + strings.Repeat("A", 64), ""},
		{"another algorithm is none", "net@sha512:" + strings.Repeat("a", 64), ""},
		{"empty is none", "", ""},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			if got := DigestOf(tc.imageID); got != tc.want {
				t.Fatalf("DigestOf(%q) = %q, want %q", tc.imageID, got, tc.want)
			}
		})
	}
}

func TestPinnedReference(t *testing.T) {
	for _, tc := range []struct {
		rule, ref, digest, want string
	}{
		{"the tag is replaced by the digest", "registry.example/modules/net:v1", digestA, "registry.example/modules/net@" + digestA},
		{"a registry port is no tag", "localhost:5000/net:v1", digestA, "localhost:5000/net@" + digestA},
		{"a registry port without tag stays", "localhost:5000/net", digestA, "localhost:5000/net@" + digestA},
		{"an untagged name gets the digest", "net", digestA, "net@" + digestA},
		{"a digest reference gets the new digest", "net:v1@sha256:" + strings.Repeat("b", 64), digestA, "net@" + digestA},
		{"without a valid digest the reference stays as written", "net:v1", "", "net:v1"},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			if got := PinnedReference(tc.ref, tc.digest); got != tc.want {
				t.Fatalf("PinnedReference(%q, %q) = %q, want %q", tc.ref, tc.digest, got, tc.want)
			}
		})
	}
}

func TestImageAllowed(t *testing.T) {
	digest := "sha256:" + strings.Repeat("a", 64)
	for _, tc := range []struct {
		rule    string
		ref     string
		allowed []string
		want    bool
	}{
		{"an empty list allows nothing", "registry.example/modules/net:v1", nil, false},
		{"a star allows every image", "anything:v1", []string{"*"}, true},
		{"the repository itself is allowed", "registry.example/modules/net:v1", []string{"registry.example/modules/net"}, true},
		{"a repository below the prefix is allowed", "registry.example/modules/net:v1", []string{"registry.example/modules"}, true},
		{"a trailing slash reads the same", "registry.example/modules/net:v1", []string{"registry.example/modules/"}, true},
		{"a pinned reference of the repository is allowed", "registry.example/modules/net@" + digest, []string{"registry.example/modules"}, true},
		{"a sibling that shares the prefix's characters is not allowed", "registry.example/modules-evil/net:v1", []string{"registry.example/modules"}, false},
		{"another registry is not allowed", "evil.example/registry.example/modules/net:v1", []string{"registry.example/modules"}, false},
		{"a registry port is part of the repository", "registry.example:5000/modules/net:v1", []string{"registry.example"}, false},
		{"a digest allows a reference pinned to it", "elsewhere.example/net@" + digest, []string{digest}, true},
		{"a digest does not allow a tag", "registry.example/modules/net:v1", []string{digest}, false},
		{"a digest does not allow another digest", "registry.example/modules/net@sha256:" + strings.Repeat("b", 64), []string{digest}, false},
		{"an empty entry allows nothing", "registry.example/modules/net:v1", []string{""}, false},
		{"any entry that matches is enough", "registry.example/modules/net:v1", []string{"other.example", "registry.example/modules"}, true},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			if got := ImageAllowed(tc.ref, tc.allowed); got != tc.want {
				t.Fatalf("ImageAllowed(%q, %q) = %v, want %v", tc.ref, tc.allowed, got, tc.want)
			}
		})
	}
}

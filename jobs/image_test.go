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

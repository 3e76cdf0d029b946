package jobs

import "strings"

// AnnotationImageDigest holds a module image digest (sha256:<64 hex>): on a finished Job, the
// digest its pod ran, written at bookkeeping; on the durable inputs Secret, the digest the newest
// successful apply ran, which refresh, drift, destroy and restore then run.
const AnnotationImageDigest = "captf.io/image-digest"

// AnnotationImage on the durable inputs Secret holds the image reference of the newest apply
// started, as written in the spec.
const AnnotationImage = "captf.io/image"

// DigestOf returns the digest in a container status imageID, such as
// "registry.example/modules/net@sha256:<hex>" or "docker-pullable://net@sha256:<hex>", or ""
// when it carries none. Only a digest after "@" names the manifest that was pulled; a bare
// "sha256:…" is the image's configuration, which cannot be pulled by.
func DigestOf(imageID string) string {
	at := strings.LastIndexByte(imageID, '@')
	if at < 0 {
		return ""
	}
	if d := imageID[at+1:]; ValidDigest(d) {
		return d
	}
	return ""
}

// ValidDigest reports whether d is a sha256 digest: "sha256:" and 64 lowercase hex characters.
func ValidDigest(d string) bool {
	hex, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(hex) != 64 {
		return false
	}
	for i := 0; i < len(hex); i++ {
		if !isLowerHex(hex[i]) {
			return false
		}
	}
	return true
}

// Repository returns an image reference without its tag and digest: "host:5000/a/b:v1@sha256:…"
// gives "host:5000/a/b". A colon counts as a tag only after the last slash, so a registry
// port stays.
func Repository(ref string) string {
	if at := strings.IndexByte(ref, '@'); at >= 0 {
		ref = ref[:at]
	}
	if colon := strings.LastIndexByte(ref, ':'); colon > strings.LastIndexByte(ref, '/') {
		ref = ref[:colon]
	}
	return ref
}

// PinnedReference returns the reference that pulls digest from ref's repository, or ref itself
// when digest is not a valid digest.
func PinnedReference(ref, digest string) string {
	if !ValidDigest(digest) {
		return ref
	}
	return Repository(ref) + "@" + digest
}

// ImageAllowed reports whether ref is one of the images allowed lists. An entry is either a
// digest ("sha256:<hex>"), which allows any reference pinned to it, or a repository prefix,
// which allows references to that repository or below it: "registry.example/modules" allows
// "registry.example/modules:v1", "registry.example/modules/net@sha256:…" and
// "registry.example/modules/net:v1", never "registry.example/modules-other/net". "*" allows
// every image. An empty list allows none.
func ImageAllowed(ref string, allowed []string) bool {
	for _, entry := range allowed {
		if imageMatches(ref, entry) {
			return true
		}
	}
	return false
}

// imageMatches reports whether ref is allowed by one allow-list entry.
func imageMatches(ref, entry string) bool {
	switch {
	case entry == "*":
		return true
	case ValidDigest(entry):
		at := strings.LastIndexByte(ref, '@')
		return at >= 0 && ref[at+1:] == entry
	case entry == "":
		return false
	}
	entry = strings.TrimSuffix(entry, "/")
	repo := Repository(ref)
	return repo == entry || strings.HasPrefix(repo, entry+"/")
}

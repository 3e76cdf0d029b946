package nodeagent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"strings"
	"sync"
)

// digestAlgorithm prefixes every digest, as in an OCI image reference.
const digestAlgorithm = "sha256:"

// registry is the agent's stand-in for a registry and a node's image store: what each image
// reference points to now, and every mapping the agent has known, by repository and digest.
// Old digests stay, so a digest reference keeps running what it named after its tag moved.
type registry struct {
	mu sync.RWMutex
	// tags maps an image reference, as pods spell it, to the digest it points to now.
	tags map[string]string
	// manifests maps a repository to the mappings it has had, by digest.
	manifests map[string]map[string]Image
}

// resolvedImage is an image reference resolved to what a container runs: a mapping, or a
// registry image whose unpacked file system is mapped at "/".
type resolvedImage struct {
	// Image holds the paths and the entrypoint (Command).
	Image
	// id is the image's ID in container statuses: <repository>@sha256:<hex>.
	id string
	// cmd, env and workingDir are a registry image's Cmd, Env and WorkingDir.
	cmd        []string
	env        []string
	workingDir string
	// rootfs is set for a registry image: "/" maps to its file system.
	rootfs bool
}

func newRegistry() *registry {
	return &registry{tags: map[string]string{}, manifests: map[string]map[string]Image{}}
}

// push points ref at img, which must be normalized, and returns img's digest.
func (r *registry) push(ref string, img Image) string {
	repo, _, _ := splitReference(ref)
	digest := imageDigest(img)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tags[ref] = digest
	if r.manifests[repo] == nil {
		r.manifests[repo] = map[string]Image{}
	}
	r.manifests[repo][digest] = img
	return digest
}

// resolve finds what a pod's image reference stands for. A reference with a digest
// (<repository>[:tag]@sha256:<hex>) names a mapping the repository has had, whatever its tags
// point to now, as a runtime pulls by digest and ignores the tag; any other reference is looked
// up exactly as spelled. The error says why a node could not pull the image.
func (r *registry) resolve(ref string) (resolvedImage, error) {
	repo, _, digest := splitReference(ref)
	r.mu.RLock()
	defer r.mu.RUnlock()
	if digest == "" {
		d, ok := r.tags[ref]
		if !ok {
			return resolvedImage{}, fmt.Errorf("image %q is not in the node agent's image map", ref)
		}
		digest = d
	} else if !validDigest(digest) {
		return resolvedImage{}, fmt.Errorf("%q is not a %s digest of 64 lowercase hex digits", digest, strings.TrimSuffix(digestAlgorithm, ":"))
	}
	img, ok := r.manifests[repo][digest]
	if !ok {
		return resolvedImage{}, fmt.Errorf("repository %q has no image with digest %s in the node agent", repo, digest)
	}
	return resolvedImage{Image: img, id: repo + "@" + digest}, nil
}

// knows reports whether ref is the agent's to resolve: a tag it was given, or a digest
// reference to a repository it was given. Any other reference is pulled from its registry.
func (r *registry) knows(ref string) bool {
	repo, _, digest := splitReference(ref)
	r.mu.RLock()
	defer r.mu.RUnlock()
	if digest != "" {
		return r.manifests[repo] != nil
	}
	_, ok := r.tags[ref]
	return ok
}

// digestOf returns the digest ref points to now.
func (r *registry) digestOf(ref string) (string, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	d, ok := r.tags[ref]
	return d, ok
}

// splitReference splits an image reference into its repository, its tag and its digest, each
// without its separator. A ':' before the last '/' belongs to a registry host's port
// (localhost:5000/x:tag), so only one after it starts a tag.
func splitReference(ref string) (repo, tag, digest string) {
	if i := strings.LastIndex(ref, "@"); i >= 0 {
		ref, digest = ref[:i], ref[i+1:]
	}
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref, tag = ref[:i], ref[i+1:]
	}
	return ref, tag, digest
}

// validDigest reports whether d is sha256:<64 lowercase hex digits>.
func validDigest(d string) bool {
	h, ok := strings.CutPrefix(d, digestAlgorithm)
	if !ok || len(h) != sha256.Size*2 {
		return false
	}
	for _, c := range h {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// imageDigest is the content-addressed identity of a normalized mapping: sha256 over a
// canonical JSON encoding of its paths, sorted by the path inside the image, and its command.
// The files' bytes are not hashed: that would read a module directory and the OpenTofu binary
// at every push, and what a re-push changes here is the mapping, not the files behind it.
func imageDigest(img Image) string {
	type pathEntry struct {
		Image string `json:"image"`
		Local string `json:"local"`
	}
	manifest := struct {
		Paths   []pathEntry `json:"paths"`
		Command []string    `json:"command"`
	}{Paths: []pathEntry{}, Command: []string{}}
	for _, in := range sortedKeys(img.Paths) {
		manifest.Paths = append(manifest.Paths, pathEntry{Image: in, Local: img.Paths[in]})
	}
	manifest.Command = append(manifest.Command, img.Command...)
	data, err := json.Marshal(manifest)
	if err != nil {
		// Strings and slices of strings always encode.
		panic(fmt.Sprintf("nodeagent: encoding an image manifest: %v", err))
	}
	sum := sha256.Sum256(data)
	return digestAlgorithm + hex.EncodeToString(sum[:])
}

// normalizeImage checks an image reference the agent is given and its mapping, and returns the
// mapping with clean paths inside the image and absolute local paths, so that equal mappings
// get equal digests.
func normalizeImage(ref string, img Image) (Image, error) {
	if ref == "" {
		return Image{}, errors.New("an image reference is empty")
	}
	if _, _, digest := splitReference(ref); digest != "" {
		return Image{}, fmt.Errorf("%q: images are given by tag; the agent computes their digests", ref)
	}
	var errs []error
	paths := make(map[string]string, len(img.Paths))
	for _, in := range sortedKeys(img.Paths) {
		local := img.Paths[in]
		if !strings.HasPrefix(in, "/") {
			errs = append(errs, fmt.Errorf("%q: path %q inside the image is not absolute", ref, in))
			continue
		}
		if local == "" {
			errs = append(errs, fmt.Errorf("%q: path %q has no local path", ref, in))
			continue
		}
		abs, err := filepath.Abs(local)
		if err != nil {
			errs = append(errs, fmt.Errorf("%q: %w", ref, err))
			continue
		}
		paths[path.Clean(in)] = abs
	}
	if err := errors.Join(errs...); err != nil {
		return Image{}, err
	}
	return Image{Paths: paths, Command: append([]string(nil), img.Command...)}, nil
}

// PushImage points ref at img, as pushing a tag to a registry does, and returns img's digest
// (sha256:<hex>). It is safe while the agent runs: pods that start afterwards and name ref run
// img, pods already running keep what they resolved, and every digest ref had before stays
// pullable as <repository>@<digest>. ref is a name with an optional tag, matched exactly as pods
// spell it; img is checked as Config.Images are.
func (a *Agent) PushImage(ref string, img Image) (string, error) {
	img, err := normalizeImage(ref, img)
	if err != nil {
		return "", fmt.Errorf("nodeagent: pushing an image: %w", err)
	}
	digest := a.images.push(ref, img)
	a.log.V(1).Info("pushed image", "image", ref, "digest", digest)
	return digest, nil
}

// ImageDigest returns the digest (sha256:<hex>) ref points to now, as a registry answers for a
// tag, or an error when the agent does not know ref.
func (a *Agent) ImageDigest(ref string) (string, error) {
	if d, ok := a.images.digestOf(ref); ok {
		return d, nil
	}
	return "", fmt.Errorf("nodeagent: image %q is not in the node agent's image map", ref)
}

package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"

	"github.com/captf/captf/hack/images/image"
)

// unpackingPrefix names the directories in which images are unpacked before they are renamed
// into place; one left by an agent that died meanwhile is removed at the next start.
const unpackingPrefix = ".unpacking-"

// hostPaths are paths a container runtime mounts from the host over an image: a registry image's
// container sees the host's, not the image's, in its arguments and environment.
var hostPaths = []string{"/dev", "/proc", "/sys"}

// pulledImage is an image pulled from a registry and unpacked on this machine.
type pulledImage struct {
	// id is <repository>@<digest>, the digest of what the reference resolved to.
	id string
	// rootfs is the unpacked file system.
	rootfs string
	// config is the image's runtime configuration: entrypoint, cmd, env, working directory.
	config v1.Config
}

// resolved is the image as the worker runs it: "/" maps to its file system.
func (p *pulledImage) resolved() resolvedImage {
	return resolvedImage{
		Image:      Image{Paths: map[string]string{"/": p.rootfs}, Command: p.config.Entrypoint},
		id:         p.id,
		cmd:        p.config.Cmd,
		env:        p.config.Env,
		workingDir: p.config.WorkingDir,
		rootfs:     true,
	}
}

// imageStore is the node's store of images pulled from registries: what each reference
// resolved to when it was last pulled, and every image by ID. The file systems live under dir,
// one per manifest digest, unpacked once and kept for the agent's work directory's life.
type imageStore struct {
	dir  string
	opts []remote.Option
	// mirrors maps a registry host to the loopback registry that serves its repositories.
	mirrors map[string]string

	mu sync.Mutex
	// refs maps a reference, as pods spell it, to what it resolved to at its last pull.
	refs map[string]*pulledImage
	// ids maps <repository>@<digest> to the image.
	ids map[string]*pulledImage
	// unpacking serializes the unpacking of one manifest digest.
	unpacking map[string]*sync.Mutex
}

func newImageStore(dir string, mirrors map[string]string) *imageStore {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	// A registry that does not answer must not hold a container's start for minutes: the
	// agent backs off and pulls again, as a kubelet does.
	transport.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	transport.ResponseHeaderTimeout = 30 * time.Second
	return &imageStore{
		dir:     dir,
		mirrors: mirrors,
		opts: []remote.Option{
			remote.WithPlatform(v1.Platform{OS: "linux", Architecture: goruntime.GOARCH}),
			remote.WithTransport(transport),
			remote.WithUserAgent(Component),
			// One try: the ImagePullBackOff loop is the retry.
			remote.WithRetryBackoff(remote.Backoff{Steps: 1}),
		},
		refs:      map[string]*pulledImage{},
		ids:       map[string]*pulledImage{},
		unpacking: map[string]*sync.Mutex{},
	}
}

// present returns what the store has for ref without asking a registry: for a digest reference
// the image with that ID, else what ref resolved to at its last pull.
func (s *imageStore) present(ref string) (*pulledImage, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	repo, _, digest := splitReference(ref)
	if digest != "" {
		p, ok := s.ids[repo+"@"+digest]
		return p, ok
	}
	p, ok := s.refs[ref]
	return p, ok
}

// pull resolves ref at its registry, as a pull does, and unpacks the image unless its digest
// already is. The error is the registry's.
func (s *imageStore) pull(ctx context.Context, ref string) (*pulledImage, error) {
	r, err := image.ParseReference(mirrored(ref, s.mirrors))
	if err != nil {
		return nil, err
	}
	desc, err := remote.Get(r, append([]remote.Option{remote.WithContext(ctx)}, s.opts...)...)
	if err != nil {
		return nil, err
	}
	repo, _, _ := splitReference(ref)
	id := repo + "@" + desc.Digest.String()
	s.mu.Lock()
	p, ok := s.ids[id]
	s.mu.Unlock()
	if !ok {
		// An index resolves to the image of this machine's platform.
		img, err := desc.Image()
		if err != nil {
			return nil, err
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			return nil, fmt.Errorf("reading the image configuration: %w", err)
		}
		digest, err := img.Digest()
		if err != nil {
			return nil, err
		}
		rootfs, err := s.unpack(img, digest)
		if err != nil {
			return nil, fmt.Errorf("unpacking %s: %w", digest, err)
		}
		p = &pulledImage{id: id, rootfs: rootfs, config: cfg.Config}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.ids[id]; ok {
		p = old
	}
	s.ids[id] = p
	s.refs[ref] = p
	return p, nil
}

// unpack returns the file system of the image with manifest digest, unpacking it first when no
// earlier pull (of this agent or one before it on the same work directory) did.
func (s *imageStore) unpack(img v1.Image, digest v1.Hash) (string, error) {
	s.mu.Lock()
	lock, ok := s.unpacking[digest.String()]
	if !ok {
		lock = &sync.Mutex{}
		s.unpacking[digest.String()] = lock
	}
	s.mu.Unlock()
	lock.Lock()
	defer lock.Unlock()

	dir := filepath.Join(s.dir, digest.Algorithm+"-"+digest.Hex)
	rootfs := filepath.Join(dir, "rootfs")
	if _, err := os.Stat(dir); err == nil {
		return rootfs, nil
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return "", err
	}
	// Unpacked aside and renamed into place, so that a directory of the digest is complete.
	tmp, err := os.MkdirTemp(s.dir, unpackingPrefix)
	if err != nil {
		return "", err
	}
	if err := unpackImage(img, filepath.Join(tmp, "rootfs")); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	return rootfs, nil
}

// removeUnfinished removes what an agent that stopped while unpacking left.
func (s *imageStore) removeUnfinished() {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), unpackingPrefix) {
			_ = os.RemoveAll(filepath.Join(s.dir, e.Name()))
		}
	}
}

// mirrored is the reference ref is pulled by: the same repository path and tag or digest at the
// mirror of its registry host, if it has one, as a container runtime's registry mirrors do.
func mirrored(ref string, mirrors map[string]string) string {
	host, rest, ok := strings.Cut(ref, "/")
	if !ok {
		return ref
	}
	if mirror, ok := mirrors[host]; ok {
		return mirror + "/" + rest
	}
	return ref
}

// neverPullError is an image a container may not pull (imagePullPolicy Never) and the node does
// not have.
type neverPullError struct{ ref string }

func (e *neverPullError) Error() string {
	return fmt.Sprintf("Container image %q is not present with pull policy of Never", e.ref)
}

// pullPolicy is the container's imagePullPolicy, defaulted as the API server does: Always for
// an image without a tag or tagged latest, else IfNotPresent.
func pullPolicy(c *corev1.Container) corev1.PullPolicy {
	if c.ImagePullPolicy != "" {
		return c.ImagePullPolicy
	}
	if _, tag, digest := splitReference(c.Image); digest == "" && (tag == "" || tag == "latest") {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

// pull gets a registry image for a container as the kubelet does under the container's pull
// policy: Always asks the registry what the reference points to now at every start,
// IfNotPresent and Never use what the node has for the reference, and only IfNotPresent pulls
// when it has nothing.
func (w *podWorker) pull(ctx context.Context, pod *corev1.Pod, c *corev1.Container) (resolvedImage, error) {
	store := w.a.pulled
	policy := pullPolicy(c)
	if policy != corev1.PullAlways {
		if p, ok := store.present(c.Image); ok {
			w.event(pod, c.Name, corev1.EventTypeNormal, "Pulled", fmt.Sprintf("Container image %q already present on machine", c.Image))
			return p.resolved(), nil
		}
		if policy == corev1.PullNever {
			return resolvedImage{}, &neverPullError{ref: c.Image}
		}
	}
	w.event(pod, c.Name, corev1.EventTypeNormal, "Pulling", fmt.Sprintf("Pulling image %q", c.Image))
	start := time.Now()
	p, err := store.pull(ctx, c.Image)
	if err != nil {
		return resolvedImage{}, err
	}
	w.event(pod, c.Name, corev1.EventTypeNormal, "Pulled", fmt.Sprintf("Successfully pulled image %q in %s", c.Image, time.Since(start).Round(time.Millisecond)))
	return p.resolved(), nil
}

// imagePullBackOff reports an image a container could not get, as a kubelet does: waiting with
// ErrImagePull and the registry's error (ErrImageNeverPull under policy Never), then, for a
// pull, ImagePullBackOff until the next try. It waits backoff and reports false when the pod
// must stop or the agent stops first.
func (w *podWorker) imagePullBackOff(ctx context.Context, pod *corev1.Pod, c *containerState, err error, backoff time.Duration) bool {
	ref, msg := c.spec.Image, err.Error()
	var never *neverPullError
	if errors.As(err, &never) {
		w.setState(c, waiting("ErrImageNeverPull", msg))
		w.event(pod, c.spec.Name, corev1.EventTypeWarning, "ErrImageNeverPull", msg)
		w.report(ctx)
		return w.sleep(ctx, backoff)
	}
	w.setState(c, waiting("ErrImagePull", msg))
	w.event(pod, c.spec.Name, corev1.EventTypeWarning, "Failed", fmt.Sprintf("Failed to pull image %q: %s", ref, msg))
	w.report(ctx)
	if !w.sleep(ctx, min(w.a.cfg.RetryInterval, backoff)) {
		return false
	}
	w.setState(c, waiting("ImagePullBackOff", fmt.Sprintf("Back-off pulling image %q: ErrImagePull: %s", ref, msg)))
	w.event(pod, c.spec.Name, corev1.EventTypeNormal, "BackOff", fmt.Sprintf("Back-off pulling image %q", ref))
	w.report(ctx)
	return w.sleep(ctx, backoff)
}

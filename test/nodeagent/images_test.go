package nodeagent_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/captf/captf/test/nodeagent"
)

// helperRepository is helperImage without its tag.
const helperRepository = "test/helper"

var digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// versionDir returns a directory whose file "version" holds version, to tell mappings apart.
func versionDir(t *testing.T, version string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "version"), []byte(version), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// withData returns img with dir at /data, leaving img as it is.
func withData(img nodeagent.Image, dir string) nodeagent.Image {
	paths := map[string]string{"/data": dir}
	for in, local := range img.Paths {
		if in != "/data" {
			paths[in] = local
		}
	}
	return nodeagent.Image{Paths: paths, Command: img.Command}
}

// catVersion is a container of image that reports the version its /data holds.
func catVersion(name, image string) corev1.Container {
	c := container(name, "--to=/dev/termination-log", "--cat=/data/version")
	c.Image = image
	return c
}

// digest returns the digest ref points to now, failing the test when the agent does not know it.
func (f *fixture) digest(ref string) string {
	f.t.Helper()
	d, err := f.agent.ImageDigest(ref)
	if err != nil {
		f.t.Fatal(err)
	}
	if !digestPattern.MatchString(d) {
		f.t.Fatalf("digest of %s is %q, want sha256:<64 hex>", ref, d)
	}
	return d
}

// ranWith checks that a container of a succeeded pod reported imageID and terminated with
// message.
func ranWith(t *testing.T, pod *corev1.Pod, name, imageID, message string) {
	t.Helper()
	s := containerStatus(t, pod, name)
	if s.ImageID != imageID {
		t.Errorf("container %s: imageID %q, want %q", name, s.ImageID, imageID)
	}
	if term := s.State.Terminated; term == nil || term.ExitCode != 0 || term.Message != message {
		t.Errorf("container %s did not run the mapping with %q: %s", name, message, describe(pod))
	}
}

// A container's status reports the image it ran as <repository>@sha256:<hex>, the digest of its
// mapping: the repository is the reference without its tag (a registry's port is not a tag),
// and equal mappings have equal digests, also when pushed again or under another name.
func TestImageIDCarriesDigest(t *testing.T) {
	const portImage = "localhost:5000/" + helperRepository + ":v1"
	f := newFixture(t, func(cfg *nodeagent.Config) {
		cfg.Images[portImage] = cfg.Images[helperImage]
	})
	d := f.digest(helperImage)
	if got := f.digest(portImage); got != d {
		t.Errorf("the same mapping under %s has digest %s, want %s", portImage, got, d)
	}
	again, err := f.agent.PushImage(helperImage, f.cfg.Images[helperImage])
	if err != nil {
		t.Fatal(err)
	}
	if again != d {
		t.Errorf("pushing the same mapping again gave digest %s, want %s", again, d)
	}
	plain := container("plain", "--to=/dev/termination-log", "--print=ran")
	port := container("port", "--to=/dev/termination-log", "--print=ran")
	port.Image = portImage
	f.createPod("image-id", podSpec(plain, port))

	pod := f.waitPhase("image-id", corev1.PodSucceeded, 30*time.Second)
	ranWith(t, pod, "plain", helperRepository+"@"+d, "ran\n")
	ranWith(t, pod, "port", "localhost:5000/"+helperRepository+"@"+d, "ran\n")
}

// A container whose image is <repository>@sha256:<hex> runs the mapping with that digest; a tag
// beside the digest is ignored, as a runtime pulls by digest.
func TestDigestReferenceRunsItsMapping(t *testing.T) {
	f := newFixture(t, func(cfg *nodeagent.Config) {
		cfg.Images[helperImage] = withData(cfg.Images[helperImage], versionDir(t, "v1"))
	})
	ref := helperRepository + "@" + f.digest(helperImage)
	f.createPod("by-digest", podSpec(
		catVersion("digest", ref),
		catVersion("tag-and-digest", helperRepository+":elsewhere@"+f.digest(helperImage)),
	))

	pod := f.waitPhase("by-digest", corev1.PodSucceeded, 30*time.Second)
	ranWith(t, pod, "digest", ref, "v1")
	ranWith(t, pod, "tag-and-digest", ref, "v1")
}

// Pushing a tag again while the agent runs points it at the new mapping, with a new digest: a
// pod that names the tag runs the new mapping, and the old digest still runs the old one.
func TestRePushedTagRunsNewMappingOldDigestRunsOld(t *testing.T) {
	f := newFixture(t, func(cfg *nodeagent.Config) {
		cfg.Images[helperImage] = withData(cfg.Images[helperImage], versionDir(t, "v1"))
	})
	old := f.digest(helperImage)
	pushed, err := f.agent.PushImage(helperImage, withData(f.cfg.Images[helperImage], versionDir(t, "v2")))
	if err != nil {
		t.Fatal(err)
	}
	if pushed == old || !digestPattern.MatchString(pushed) {
		t.Fatalf("the re-push gave digest %q; the old one is %s", pushed, old)
	}
	if now := f.digest(helperImage); now != pushed {
		t.Errorf("%s points to %s after the push, want %s", helperImage, now, pushed)
	}
	f.createPod("re-pushed", podSpec(
		catVersion("tag", helperImage),
		catVersion("old-digest", helperRepository+"@"+old),
		catVersion("new-digest", helperRepository+"@"+pushed),
	))

	pod := f.waitPhase("re-pushed", corev1.PodSucceeded, 30*time.Second)
	ranWith(t, pod, "tag", helperRepository+"@"+pushed, "v2")
	ranWith(t, pod, "old-digest", helperRepository+"@"+old, "v1")
	ranWith(t, pod, "new-digest", helperRepository+"@"+pushed, "v2")
}

// A digest the agent has never known under the repository cannot be pulled: the container waits
// with ErrImagePull and then ImagePullBackOff, and the pod stays Pending, as with an unknown tag.
// A digest known only under another repository does not count: that repository is a registry
// image, here one whose registry does not resolve.
func TestUnknownDigestIsPullFailure(t *testing.T) {
	f := newFixture(t, nil)
	unknown := helperRepository + "@sha256:" + strings.Repeat("0", 64)
	otherRepo := "registry.invalid/other/helper@" + f.digest(helperImage)
	a := container("unknown")
	a.Image = unknown
	b := container("other-repo")
	b.Image = otherRepo
	f.createPod("unknown-digest", podSpec(a, b))

	f.waitPod("unknown-digest", "ImagePullBackOff", 30*time.Second, func(p *corev1.Pod) (bool, string) {
		if p.Status.Phase != corev1.PodPending || len(p.Status.ContainerStatuses) != 2 {
			return false, describe(p)
		}
		for _, s := range p.Status.ContainerStatuses {
			if s.State.Waiting == nil || s.State.Waiting.Reason != "ImagePullBackOff" {
				return false, describe(p)
			}
		}
		return true, ""
	})
	f.waitEvent("unknown-digest", "Failed", `Failed to pull image "`+unknown+`"`)
	f.waitEvent("unknown-digest", "Failed", `Failed to pull image "`+otherRepo+`"`)
}

package nodeagent_test

import (
	"archive/tar"
	"bytes"
	"io"
	"log"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	corev1 "k8s.io/api/core/v1"

	"github.com/captf/captf/test/nodeagent"
)

// registryHost serves an in-memory registry on a loopback port for the test and returns its
// host:port.
func registryHost(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// runScript is the entrypoint of scriptImage. Processes run on the host, so the kernel runs it
// with the host's /bin/sh; it uses shell builtins only, as the image's PATH holds nothing else.
// It writes "<version> <args after the first>|$GREETING|$FROM_IMAGE|<working directory>" to
// the file its first argument names.
const runScript = `#!/bin/sh
out=$1
shift
echo "VERSION $*|$GREETING|$FROM_IMAGE|$(pwd)" > "$out"
`

// scriptImage is an image of runScript for version: entrypoint /bin/run.sh, cmd
// [/dev/termination-log from-cmd], env GREETING=image and FROM_IMAGE=yes, working directory
// /work.
func scriptImage(t *testing.T, version string) v1.Image {
	t.Helper()
	script := strings.Replace(runScript, "VERSION", version, 1)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "bin/run.sh", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(script))},
		{Name: "work/", Typeflag: tar.TypeDir, Mode: 0o755},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(script)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	cfg.Config.Entrypoint = []string{"/bin/run.sh"}
	cfg.Config.Cmd = []string{"/dev/termination-log", "from-cmd"}
	cfg.Config.Env = []string{"PATH=/bin", "GREETING=image", "FROM_IMAGE=yes"}
	cfg.Config.WorkingDir = "/work"
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// pushImage pushes img to ref over plain HTTP and returns its digest.
func pushImage(t *testing.T, ref string, img v1.Image) string {
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
	return d.String()
}

// imageContainer is a container of image with the pull policy, the default termination path
// and GREETING=pod unless noEnv.
func imageContainer(name, image string, policy corev1.PullPolicy) corev1.Container {
	return corev1.Container{
		Name: name, Image: image, ImagePullPolicy: policy,
		Env:                    []corev1.EnvVar{{Name: "GREETING", Value: "pod"}},
		TerminationMessagePath: corev1.TerminationMessagePathDefault,
	}
}

// A pod naming an image in a loopback registry runs the image's entrypoint on its unpacked file
// system, as Kubernetes combines them: the container's command replaces the entrypoint and its
// args the cmd (a command alone drops the cmd), the image's env comes first and the pod's
// overrides it, and the image's working directory applies when the container sets none. The
// status reports the image as named and its ID as <repository>@<manifest digest>.
func TestRegistryImageRunsAsKubernetesCombinesImageAndContainer(t *testing.T) {
	host := registryHost(t)
	ref := host + "/x:v1"
	digest := pushImage(t, ref, scriptImage(t, "v1"))
	f := newFixture(t, nil)

	defaults := imageContainer("image-defaults", ref, corev1.PullIfNotPresent)
	defaults.Env = nil
	args := imageContainer("args", ref, corev1.PullIfNotPresent)
	args.Args = []string{"/dev/termination-log", "from-args"}
	command := imageContainer("command", ref, corev1.PullIfNotPresent)
	command.Command = []string{"/bin/run.sh", "/dev/termination-log"}
	workdir := imageContainer("workdir", ref, corev1.PullIfNotPresent)
	workdir.WorkingDir = "/bin"
	f.createPod("registry", podSpec(defaults, args, command, workdir))

	pod := f.waitPhase("registry", corev1.PodSucceeded, 60*time.Second)
	rootfs := filepath.Join(f.cfg.WorkDir, "images", "sha256-"+strings.TrimPrefix(digest, "sha256:"), "rootfs")
	for _, rule := range []struct{ name, container, message string }{
		{"the image's entrypoint, cmd, env and working directory", "image-defaults", "v1 from-cmd|image|yes|" + rootfs + "/work\n"},
		{"args replace the cmd; the pod's env overrides the image's", "args", "v1 from-args|pod|yes|" + rootfs + "/work\n"},
		{"a command alone drops the cmd", "command", "v1 |pod|yes|" + rootfs + "/work\n"},
		{"the container's working directory wins", "workdir", "v1 from-cmd|pod|yes|" + rootfs + "/bin\n"},
	} {
		s := containerStatus(t, pod, rule.container)
		if term := s.State.Terminated; term == nil || term.ExitCode != 0 || term.Message != rule.message {
			t.Errorf("%s: %s; want message %q", rule.name, describe(pod), rule.message)
		}
		if s.Image != ref || s.ImageID != host+"/x@"+digest {
			t.Errorf("%s: image %q, imageID %q; want %q, %q", rule.name, s.Image, s.ImageID, ref, host+"/x@"+digest)
		}
	}
	f.waitEvent("registry", "Pulled", `Successfully pulled image "`+ref+`"`)
}

// A tag pushed again runs its new content for a container whose policy is Always, which asks
// the registry at every start, while IfNotPresent keeps what the node pulled for the tag until
// then, and a reference by the old digest still runs the old content.
func TestRePushedRegistryTagRunsNewContentUnderAlways(t *testing.T) {
	host := registryHost(t)
	ref := host + "/x:v1"
	old := pushImage(t, ref, scriptImage(t, "v1"))
	f := newFixture(t, nil)
	f.createPod("first", podSpec(imageContainer("tag", ref, corev1.PullIfNotPresent)))
	f.waitPhase("first", corev1.PodSucceeded, 60*time.Second)
	pushed := pushImage(t, ref, scriptImage(t, "v2"))
	if pushed == old {
		t.Fatal("the re-push kept the digest")
	}

	ran := func(pod, container, version, id string) {
		t.Helper()
		p := f.waitPhase(pod, corev1.PodSucceeded, 60*time.Second)
		s := containerStatus(t, p, container)
		if term := s.State.Terminated; term == nil || !strings.HasPrefix(term.Message, version+" ") || s.ImageID != id {
			t.Errorf("container %s: imageID %q, %s; want %s from %s", container, s.ImageID, describe(p), version, id)
		}
	}
	// One pod at a time: the node's image for the tag is whatever its last pull found.
	f.createPod("present", podSpec(
		imageContainer("if-not-present", ref, corev1.PullIfNotPresent),
		imageContainer("old-digest", host+"/x@"+old, corev1.PullAlways),
	))
	ran("present", "if-not-present", "v1", host+"/x@"+old)
	ran("present", "old-digest", "v1", host+"/x@"+old)
	f.createPod("always", podSpec(imageContainer("always", ref, corev1.PullAlways)))
	ran("always", "always", "v2", host+"/x@"+pushed)
	f.createPod("after", podSpec(imageContainer("if-not-present", ref, corev1.PullIfNotPresent)))
	ran("after", "if-not-present", "v2", host+"/x@"+pushed)
}

// An image its registry does not have waits with ErrImagePull and the registry's error, then
// ImagePullBackOff, and is pulled again after the back-off: once pushed, it runs. A container
// whose policy is Never and whose image the node does not have waits with ErrImageNeverPull.
func TestMissingRegistryImageIsPulledAgainAfterBackOff(t *testing.T) {
	host := registryHost(t)
	ref := host + "/late:v1"
	f := newFixture(t, func(cfg *nodeagent.Config) {
		// Long enough for ErrImagePull to be seen between tries.
		cfg.RetryInterval = time.Second
		cfg.MaxImagePullBackoff = 2 * time.Second
	})
	f.createPod("missing", podSpec(imageContainer("main", ref, corev1.PullIfNotPresent)))
	f.createPod("never", podSpec(imageContainer("main", host+"/x:v1", corev1.PullNever)))

	waiting := func(pod, reason, text string) {
		f.waitPod(pod, reason, 30*time.Second, func(p *corev1.Pod) (bool, string) {
			if p.Status.Phase != corev1.PodPending || len(p.Status.ContainerStatuses) != 1 {
				return false, describe(p)
			}
			w := p.Status.ContainerStatuses[0].State.Waiting
			return w != nil && w.Reason == reason && strings.Contains(w.Message, text), describe(p)
		})
	}
	waiting("missing", "ErrImagePull", "NAME_UNKNOWN")
	waiting("missing", "ImagePullBackOff", "NAME_UNKNOWN")
	f.waitEvent("missing", "Failed", `Failed to pull image "`+ref+`"`)
	waiting("never", "ErrImageNeverPull", "is not present with pull policy of Never")

	pushImage(t, ref, scriptImage(t, "v1"))
	pod := f.waitPhase("missing", corev1.PodSucceeded, 30*time.Second)
	if s := containerStatus(t, pod, "main"); s.State.Terminated == nil || !strings.HasPrefix(s.State.Terminated.Message, "v1 ") {
		t.Errorf("after the push: %s", describe(pod))
	}
}

package nodeagent_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/captf/captf/test/nodeagent"
)

// A Job's pod is bound to the agent's Node and run: the init container writes into an emptyDir
// that the main container reads, the real Job controller sees the pod succeed and completes the
// Job, and the pod's status carries exit codes, reasons, times and the termination message.
func TestJobRunsToCompletion(t *testing.T) {
	f := newFixture(t, nil)
	shared := corev1.VolumeMount{Name: "shared", MountPath: "/shared"}
	initC := container("init", "--print=init-log-line", "--to=/shared/greeting", "--print=hello-from-init")
	initC.VolumeMounts = []corev1.VolumeMount{shared}
	mainC := container("main", "--to=/dev/termination-log", "--cat=/shared/greeting", "--print=done")
	mainC.VolumeMounts = []corev1.VolumeMount{shared}
	spec := podSpec(mainC)
	spec.InitContainers = []corev1.Container{initC}
	spec.Volumes = []corev1.Volume{{Name: "shared", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	job := f.createJob("complete", spec, nil)

	f.waitJobCondition(job.Name, batchv1.JobComplete, 60*time.Second)
	pod := f.jobPod(job)
	if pod.Spec.NodeName != f.cfg.NodeName {
		t.Errorf("pod bound to %q, want %q", pod.Spec.NodeName, f.cfg.NodeName)
	}
	if pod.Status.Phase != corev1.PodSucceeded {
		t.Errorf("phase %s, want Succeeded: %s", pod.Status.Phase, describe(pod))
	}
	initStatus := containerStatus(t, pod, "init")
	if term := initStatus.State.Terminated; term == nil || term.ExitCode != 0 || term.Reason != "Completed" {
		t.Errorf("init container: %s", describe(pod))
	}
	mainStatus := containerStatus(t, pod, "main")
	term := mainStatus.State.Terminated
	if term == nil {
		t.Fatalf("main container not terminated: %s", describe(pod))
	}
	if term.ExitCode != 0 || term.Reason != "Completed" || term.Message != "hello-from-init\ndone\n" {
		t.Errorf("main container terminated with %d %s %q", term.ExitCode, term.Reason, term.Message)
	}
	if term.StartedAt.IsZero() || term.FinishedAt.Before(&term.StartedAt) {
		t.Errorf("startedAt %v, finishedAt %v", term.StartedAt, term.FinishedAt)
	}
	for typ, want := range map[corev1.PodConditionType]corev1.ConditionStatus{
		corev1.PodScheduled:    corev1.ConditionTrue,
		corev1.PodInitialized:  corev1.ConditionTrue,
		corev1.ContainersReady: corev1.ConditionFalse,
		corev1.PodReady:        corev1.ConditionFalse,
	} {
		if c := podCondition(pod, typ); c == nil || c.Status != want {
			t.Errorf("condition %s = %v, want %s", typ, c, want)
		}
	}
	if c := podCondition(pod, corev1.PodReady); c != nil && c.Reason != "PodCompleted" {
		t.Errorf("Ready reason %q, want PodCompleted", c.Reason)
	}
	log, err := os.ReadFile(filepath.Join(f.podDir(pod), "init.log"))
	if err != nil || string(log) != "init-log-line\n" {
		t.Errorf("init.log = %q, %v", log, err)
	}

	// The Node is registered with its capacity and keeps a heartbeat Lease.
	node, err := f.client.CoreV1().Nodes().Get(context.Background(), f.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cpu := node.Status.Allocatable[corev1.ResourceCPU]; cpu.IsZero() {
		t.Errorf("node allocatable %v", node.Status.Allocatable)
	}
	lease, err := f.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(context.Background(), f.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("node lease: %v", err)
	}
	if lease.Spec.RenewTime == nil || ptr.Deref(lease.Spec.HolderIdentity, "") != f.cfg.NodeName {
		t.Errorf("lease %+v", lease.Spec)
	}
}

// A container that exits non-zero fails its pod, and the Job controller fails the Job.
func TestJobFails(t *testing.T) {
	f := newFixture(t, nil)
	job := f.createJob("fail", podSpec(container("main", "--to=/dev/termination-log", "--print=boom", "--exit=3")), nil)

	f.waitJobCondition(job.Name, batchv1.JobFailed, 60*time.Second)
	pod := f.jobPod(job)
	if pod.Status.Phase != corev1.PodFailed {
		t.Errorf("phase %s, want Failed", pod.Status.Phase)
	}
	term := containerStatus(t, pod, "main").State.Terminated
	if term == nil || term.ExitCode != 3 || term.Reason != "Error" || term.Message != "boom\n" {
		t.Errorf("main container: %s", describe(pod))
	}
}

// With restartPolicy OnFailure a failed container is restarted: the restart is counted and
// the failed run is its last state. (With Never, as in every other test, nothing restarts.)
func TestRestartOnFailure(t *testing.T) {
	f := newFixture(t, nil)
	once := filepath.Join(t.TempDir(), "failed-once")
	spec := podSpec(container("main", "--fail-once="+once, "--to=/dev/termination-log", "--print=second run"))
	spec.RestartPolicy = corev1.RestartPolicyOnFailure
	f.createPod("restart", spec)

	pod := f.waitPhase("restart", corev1.PodSucceeded, 30*time.Second)
	s := containerStatus(t, pod, "main")
	if s.RestartCount != 1 {
		t.Errorf("restartCount %d, want 1", s.RestartCount)
	}
	if last := s.LastTerminationState.Terminated; last == nil || last.ExitCode != 7 {
		t.Errorf("last state %+v, want terminated with 7", s.LastTerminationState)
	}
	if term := s.State.Terminated; term == nil || term.ExitCode != 0 || term.Message != "second run\n" {
		t.Errorf("state %+v", s.State)
	}
}

// A Secret volume waits for its Secret, as on a kubelet: the pod stays Pending with its
// container ContainerCreating. Once the Secret exists, its items appear at their paths with
// their modes, through the kubelet's ..data links.
func TestSecretVolume(t *testing.T) {
	f := newFixture(t, nil)
	c := container("main",
		"--to=/dev/termination-log",
		"--stat=/etc/conf/a.txt", "--stat=/etc/conf/sub/b.txt", "--cat=/etc/conf/a.txt")
	c.VolumeMounts = []corev1.VolumeMount{{Name: "conf", MountPath: "/etc/conf", ReadOnly: true}}
	spec := podSpec(c)
	spec.Volumes = []corev1.Volume{{Name: "conf", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName:  "conf",
		DefaultMode: ptr.To[int32](0o440),
		Items: []corev1.KeyToPath{
			{Key: "a", Path: "a.txt"},
			{Key: "b", Path: "sub/b.txt", Mode: ptr.To[int32](0o600)},
		},
	}}}}
	f.createPod("secret", spec)

	f.waitPod("secret", "waiting for its Secret", 30*time.Second, func(p *corev1.Pod) (bool, string) {
		if len(p.Status.ContainerStatuses) != 1 {
			return false, describe(p)
		}
		w := p.Status.ContainerStatuses[0].State.Waiting
		return p.Spec.NodeName == f.cfg.NodeName && p.Status.Phase == corev1.PodPending &&
			w != nil && w.Reason == "ContainerCreating" && strings.Contains(w.Message, `secret "conf" not found`), describe(p)
	})
	f.waitEvent("secret", "FailedMount", `secret "conf" not found`)

	_, err := f.client.CoreV1().Secrets(f.ns).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "conf"},
		Data:       map[string][]byte{"a": []byte("alpha"), "b": []byte("beta"), "c": []byte("not listed")},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := f.waitPhase("secret", corev1.PodSucceeded, 30*time.Second)
	if msg := containerStatus(t, pod, "main").State.Terminated.Message; msg != "0440\n0600\nalpha" {
		t.Errorf("termination message %q", msg)
	}
}

// Container paths are rewritten to local ones: in arguments (whole, and after '='), in env
// values (also in ':' lists and after $(VAR) expansion) and in the working directory; image
// paths map to local files. Nothing of the agent's own environment reaches the container.
func TestPathRewriting(t *testing.T) {
	t.Setenv("NODEAGENT_TEST_LEAK", "agent-only")
	data := t.TempDir()
	if err := os.WriteFile(filepath.Join(data, "hello.txt"), []byte("from the image"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(cfg *nodeagent.Config) {
		img := cfg.Images[helperImage]
		img.Paths["/data"] = data
	})
	c := container("main",
		"--to=/captf/work/out", "--print=written",
		"--to=/dev/termination-log", "--args", "--env",
		"--cat=/captf/work/out", "--cat=/data/hello.txt", "--cat=relative-out")
	c.WorkingDir = "/captf/work"
	c.VolumeMounts = []corev1.VolumeMount{{Name: "work", MountPath: "/captf/work"}}
	c.Env = []corev1.EnvVar{
		{Name: "HOME", Value: "/captf/work"},
		{Name: "LIST", Value: "/captf/work/a:/data/b:/elsewhere"},
		{Name: "REF", Value: "$(HOME)/x"},
		{Name: "PLAIN", Value: "no-path"},
		{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
	}
	prep := container("prep", "--to=relative-out", "--print=in the working dir")
	prep.WorkingDir = "/captf/work"
	prep.VolumeMounts = c.VolumeMounts
	spec := podSpec(c)
	spec.InitContainers = []corev1.Container{prep}
	spec.Volumes = []corev1.Volume{{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	pod := f.createPod("paths", spec)

	pod = f.waitPhase(pod.Name, corev1.PodSucceeded, 30*time.Second)
	work := filepath.Join(f.podDir(pod), "volumes", "work")
	msg := containerStatus(t, pod, "main").State.Terminated.Message
	lines := strings.Split(msg, "\n")
	for _, want := range []string{
		"--to=" + work + "/out",
		"--to=" + filepath.Join(f.podDir(pod), "termination", "main"),
		"--cat=" + data + "/hello.txt",
		"--cat=relative-out",
		"HOME=" + work,
		"LIST=" + work + "/a:" + data + "/b:/elsewhere",
		"REF=" + work + "/x",
		"PLAIN=no-path",
		"POD=paths",
		"HOSTNAME=paths",
		"PATH=" + nodeagent.DefaultPath,
	} {
		if !hasLine(lines, want) {
			t.Errorf("missing line %q in:\n%s", want, msg)
		}
	}
	for _, want := range []string{"written", "from the image", "in the working dir"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q was not read back:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "NODEAGENT_TEST_LEAK") {
		t.Errorf("the agent's environment leaked into the container:\n%s", msg)
	}
}

// in_cluster_config=true becomes config_path=<kubeconfig>, whose token is a TokenRequest token
// of the pod's ServiceAccount: the container authenticates as that ServiceAccount. Until the
// ServiceAccount exists, the pod waits.
func TestInClusterConfig(t *testing.T) {
	f := newFixture(t, nil)
	spec := podSpec(container("main", "--backend-config=in_cluster_config=true", "--to=/dev/termination-log", "--whoami"))
	spec.ServiceAccountName = "captf-runner"
	f.createPod("whoami", spec)

	f.waitPod("whoami", "waiting for its ServiceAccount", 30*time.Second, func(p *corev1.Pod) (bool, string) {
		if len(p.Status.ContainerStatuses) != 1 {
			return false, describe(p)
		}
		w := p.Status.ContainerStatuses[0].State.Waiting
		return w != nil && strings.Contains(w.Message, `serviceaccount "captf-runner" not found`), describe(p)
	})
	_, err := f.client.CoreV1().ServiceAccounts(f.ns).Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "captf-runner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := f.waitPhase("whoami", corev1.PodSucceeded, 30*time.Second)
	want := "system:serviceaccount:" + f.ns + ":captf-runner\n"
	if msg := containerStatus(t, pod, "main").State.Terminated.Message; msg != want {
		t.Errorf("the container authenticated as %q, want %q", msg, want)
	}
}

// A Job past its activeDeadlineSeconds: the Job controller deletes the pod, the agent sends
// SIGTERM, the process exits, the pod is removed, and the Job fails with DeadlineExceeded.
func TestActiveDeadline(t *testing.T) {
	f := newFixture(t, nil)
	marker := markerFile(t)
	job := f.createJob("deadline", podSpec(container("main", "--marker="+marker, "--sleep")), func(j *batchv1.Job) {
		j.Spec.ActiveDeadlineSeconds = ptr.To[int64](2)
	})
	pod := f.jobPod(job)

	cond := f.waitJobCondition(job.Name, batchv1.JobFailed, 60*time.Second)
	if cond.Reason != batchv1.JobReasonDeadlineExceeded {
		t.Errorf("Failed reason %q, want DeadlineExceeded", cond.Reason)
	}
	f.waitGone(pod.Name, 30*time.Second)
	lines := readMarker(marker)
	if !hasLine(lines, "term") {
		t.Errorf("the process got no SIGTERM: %q", lines)
	}
	for _, pid := range markerPIDs(marker, "start") {
		if nodeagent.ProcessAlive(pid) {
			t.Errorf("process %d is still running", pid)
		}
	}
}

// Deleting a running pod sends SIGTERM; a process that ignores it is killed once the grace
// period has passed, and then the pod is removed from the API.
func TestDeleteKillsAfterGracePeriod(t *testing.T) {
	f := newFixture(t, nil)
	marker := markerFile(t)
	spec := podSpec(container("main", "--marker="+marker, "--ignore-term", "--sleep"))
	f.createPod("stubborn", spec)
	f.waitPhase("stubborn", corev1.PodRunning, 30*time.Second)
	f.waitFor("the process to start", 10*time.Second, func() (bool, string) {
		return len(markerPIDs(marker, "start")) == 1, strings.Join(readMarker(marker), ",")
	})

	start := time.Now()
	if err := f.client.CoreV1().Pods(f.ns).Delete(context.Background(), "stubborn", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](2)}); err != nil {
		t.Fatal(err)
	}
	f.waitFor("SIGTERM", 10*time.Second, func() (bool, string) {
		return hasLine(readMarker(marker), "term"), strings.Join(readMarker(marker), ",")
	})
	f.waitGone("stubborn", 30*time.Second)
	if elapsed := time.Since(start); elapsed < 2*time.Second {
		t.Errorf("the pod was gone after %s, before its grace period of 2s", elapsed)
	}
	pid := markerPIDs(marker, "start")[0]
	if nodeagent.ProcessAlive(pid) {
		t.Errorf("process %d survived its pod", pid)
	}
}

// Stopping the agent kills every process it started, including a child that left the
// container's process group, and marks the Node not ready.
func TestShutdownKillsEveryProcess(t *testing.T) {
	f := newFixture(t, nil)
	marker := markerFile(t)
	f.createPod("tree", podSpec(container("main", "--marker="+marker, "--spawn", "--ignore-term", "--sleep")))
	f.waitPhase("tree", corev1.PodRunning, 30*time.Second)
	// The parent notes the child when it spawns it; the child notes its own start a moment later.
	f.waitFor("the child to start", 10*time.Second, func() (bool, string) {
		return len(markerPIDs(marker, "child")) == 1 && len(markerPIDs(marker, "start")) == 2, strings.Join(readMarker(marker), ",")
	})
	pids := markerPIDs(marker, "start")
	if len(pids) != 2 {
		t.Fatalf("marker: %q", readMarker(marker))
	}

	f.stop()
	f.waitFor("every process to be gone", 5*time.Second, func() (bool, string) {
		for _, pid := range pids {
			if nodeagent.ProcessAlive(pid) {
				return false, "still running"
			}
		}
		return true, ""
	})
	node, err := f.client.CoreV1().Nodes().Get(context.Background(), f.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s := nodeReady(node); s != corev1.ConditionFalse {
		t.Errorf("node Ready=%s after the agent stopped, want False", s)
	}
}

// A container whose image cannot be pulled (its registry's name does not resolve) waits with
// ErrImagePull and then ImagePullBackOff, and its pod stays Pending, as on a node that cannot
// pull. Deleting it removes it.
func TestUnknownImage(t *testing.T) {
	f := newFixture(t, nil)
	c := container("main")
	c.Image = "registry.invalid/nope:v0"
	f.createPod("unknown", podSpec(c))

	f.waitPod("unknown", "ImagePullBackOff", 30*time.Second, func(p *corev1.Pod) (bool, string) {
		if len(p.Status.ContainerStatuses) != 1 {
			return false, describe(p)
		}
		w := p.Status.ContainerStatuses[0].State.Waiting
		return p.Status.Phase == corev1.PodPending && w != nil && w.Reason == "ImagePullBackOff", describe(p)
	})
	f.waitEvent("unknown", "Failed", `Failed to pull image "registry.invalid/nope:v0"`)
	if err := f.client.CoreV1().Pods(f.ns).Delete(context.Background(), "unknown", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitGone("unknown", 30*time.Second)
}

// A command that is not a program of the image or of a volume does not run, even when this
// machine has it: the container ends with StartError, as a container whose image lacks it.
func TestHostProgramDoesNotRun(t *testing.T) {
	f := newFixture(t, nil)
	c := container("main")
	c.Command = []string{"sh", "-c", "exit 0"}
	f.createPod("host", podSpec(c))

	pod := f.waitPhase("host", corev1.PodFailed, 30*time.Second)
	term := containerStatus(t, pod, "main").State.Terminated
	if term == nil || term.Reason != "StartError" || term.ExitCode != 128 || !strings.Contains(term.Message, "neither in the image") {
		t.Errorf("container: %s", describe(pod))
	}
}

// An agent that restarts finds a pod its predecessor was running; the processes are gone (they
// died with the old agent), so it marks the pod Failed, as a node that lost it.
func TestRestartMarksLostPodsFailed(t *testing.T) {
	f := newFixture(t, nil)
	f.createPod("lost", podSpec(container("main", "--sleep")))
	f.waitPhase("lost", corev1.PodRunning, 30*time.Second)

	f.stop()
	if p, err := f.getPod("lost"); err != nil || p.Status.Phase != corev1.PodRunning {
		t.Fatalf("after the agent stopped the pod should still read Running: %v %v", err, p)
	}
	f.start()
	pod := f.waitPhase("lost", corev1.PodFailed, 30*time.Second)
	if pod.Status.Reason != nodeagent.ReasonNodeAgentRestarted {
		t.Errorf("reason %q, want %s", pod.Status.Reason, nodeagent.ReasonNodeAgentRestarted)
	}
	term := containerStatus(t, pod, "main").State.Terminated
	if term == nil || term.Reason != "ContainerStatusUnknown" || term.ExitCode != 137 {
		t.Errorf("container: %s", describe(pod))
	}
}

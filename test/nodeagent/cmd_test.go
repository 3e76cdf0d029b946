package nodeagent_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The agent runs as a process (hack/nodeagent): it registers its Node from flags, runs a pod
// with an image given by --image, and on SIGTERM stops and marks its Node not ready.
func TestCommand(t *testing.T) {
	f := newNamespace(t, nil)
	bin := filepath.Join(t.TempDir(), "nodeagent")
	build := exec.Command("go", "build", "-o", bin, "./hack/nodeagent")
	build.Dir = f.env.RepoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building hack/nodeagent: %v: %s", err, out)
	}
	cmd := exec.Command(bin,
		"--kubeconfig="+f.env.Kubeconfig,
		"--node-name="+f.cfg.NodeName,
		"--selector="+f.cfg.PodSelector,
		"--workdir="+f.cfg.WorkDir,
		"--image="+helperImage+",/helper="+f.cfg.Images[helperImage].Paths["/helper"],
		"--v=1",
	)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// exited is closed once the agent has exited, with its exit error in exitErr: the cleanup
	// kills it and only waits (killed, it exits by SIGKILL), the test checks its stop on SIGTERM.
	exited := make(chan struct{})
	var exitErr error
	go func() {
		exitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	f.createPod("cmd", podSpec(container("main", "--to=/dev/termination-log", "--print=ran")))
	pod := f.waitPhase("cmd", corev1.PodSucceeded, 60*time.Second)
	if msg := containerStatus(t, pod, "main").State.Terminated.Message; msg != "ran\n" {
		t.Errorf("termination message %q", msg)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if exitErr != nil {
			t.Errorf("the agent exited with %v", exitErr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not stop on SIGTERM")
	}
	node, err := f.client.CoreV1().Nodes().Get(context.Background(), f.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s := nodeReady(node); s != corev1.ConditionFalse {
		t.Errorf("node Ready=%s after the agent stopped, want False", s)
	}
}

package nodeagent_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/captf/captf/test/nodeagent"
	"github.com/captf/captf/test/testenv"
)

func TestMain(m *testing.M) {
	// The captf CRDs are not needed here, only Jobs, pods and the Job controller.
	os.Exit(testenv.Main(m, testenv.Options{ControllerManager: true, SkipCRDs: true}))
}

// helperImage is the image the helper program stands for.
const helperImage = "test/helper:v1"

// testLabel carries the fixture's name on its pods, so that each test's agent binds only its
// own pods.
const testLabel = "nodeagent-test"

var (
	helperOnce sync.Once
	helperPath string
	helperErr  error
)

// helperBinary builds testdata/helper once per test binary.
func helperBinary(t *testing.T, env *testenv.Env) string {
	t.Helper()
	helperOnce.Do(func() {
		helperPath = filepath.Join(env.Dir, "nodeagent-helper")
		cmd := exec.Command("go", "build", "-o", helperPath, "./testdata/helper")
		if out, err := cmd.CombinedOutput(); err != nil {
			helperErr = fmt.Errorf("building the helper: %w: %s", err, out)
		}
	})
	if helperErr != nil {
		t.Fatal(helperErr)
	}
	return helperPath
}

// fixture is one test's namespace and node agent.
type fixture struct {
	t      *testing.T
	env    *testenv.Env
	client kubernetes.Interface
	ns     string
	cfg    nodeagent.Config
	// agent is the running agent, for pushing images.
	agent *nodeagent.Agent

	cancel context.CancelFunc
	done   chan error
}

func randomSuffix(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// newFixture creates a namespace and starts an agent with its own Node, which binds only the
// pods of this fixture. mut adjusts the agent's Config.
func newFixture(t *testing.T, mut func(*nodeagent.Config)) *fixture {
	t.Helper()
	f := newNamespace(t, mut)
	f.start()
	t.Cleanup(f.stop)
	return f
}

// newNamespace creates the namespace and the agent's Config of a fixture, without starting the
// agent.
func newNamespace(t *testing.T, mut func(*nodeagent.Config)) *fixture {
	t.Helper()
	env := testenv.Get(t)
	client, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "nodeagent-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node := "na-" + randomSuffix(t)
	f := &fixture{
		t:      t,
		env:    env,
		client: client,
		ns:     ns.Name,
		cfg: nodeagent.Config{
			RESTConfig:    env.Config,
			NodeName:      node,
			PodSelector:   "captf.io/managed=true," + testLabel + "=" + node,
			WorkDir:       t.TempDir(),
			Images:        map[string]nodeagent.Image{helperImage: {Paths: map[string]string{"/helper": helperBinary(t, env)}}},
			RetryInterval: 200 * time.Millisecond,
			Log:           testr.NewWithOptions(t, testr.Options{Verbosity: 1}),
		},
	}
	if mut != nil {
		mut(&f.cfg)
	}
	return f
}

// start runs the agent in the background and waits for its Node to be Ready.
func (f *fixture) start() {
	f.t.Helper()
	agent, err := nodeagent.New(f.cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.agent, f.cancel, f.done = agent, cancel, make(chan error, 1)
	go func() { f.done <- agent.Run(ctx) }()
	f.waitFor("the node to be Ready", 30*time.Second, func() (bool, string) {
		select {
		case err := <-f.done:
			f.done <- err
			f.t.Fatalf("the agent stopped: %v", err)
		default:
		}
		node, err := f.client.CoreV1().Nodes().Get(context.Background(), f.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return nodeReady(node) == corev1.ConditionTrue, "not ready"
	})
}

// stop stops the agent and waits for Run to return.
func (f *fixture) stop() {
	f.t.Helper()
	if f.cancel == nil {
		return
	}
	f.cancel()
	select {
	case err := <-f.done:
		if err != nil {
			f.t.Errorf("Run: %v", err)
		}
	case <-time.After(60 * time.Second):
		f.t.Error("the agent did not stop within 60s")
	}
	f.cancel = nil
}

func nodeReady(node *corev1.Node) corev1.ConditionStatus {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}

// waitFor polls cond until it holds or the timeout passes; cond says why it does not hold yet.
func (f *fixture) waitFor(what string, timeout time.Duration, cond func() (bool, string)) {
	f.t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, why := cond()
		if ok {
			return
		}
		last = why
		if time.Now().After(deadline) {
			f.t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// labels are the labels of the fixture's pods.
func (f *fixture) labels() map[string]string {
	return map[string]string{"captf.io/managed": "true", testLabel: f.cfg.NodeName}
}

// container is a helper container running args.
func container(name string, args ...string) corev1.Container {
	return corev1.Container{
		Name:                     name,
		Image:                    helperImage,
		Command:                  []string{"/helper"},
		Args:                     args,
		TerminationMessagePath:   corev1.TerminationMessagePathDefault,
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
	}
}

// podSpec is a spec that never restarts, with a short grace period.
func podSpec(containers ...corev1.Container) corev1.PodSpec {
	return corev1.PodSpec{
		RestartPolicy:                 corev1.RestartPolicyNever,
		TerminationGracePeriodSeconds: ptr.To[int64](5),
		Containers:                    containers,
	}
}

// createPod creates a pod of the fixture.
func (f *fixture) createPod(name string, spec corev1.PodSpec) *corev1.Pod {
	f.t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Labels: f.labels()},
		Spec:       spec,
	}
	pod, err := f.client.CoreV1().Pods(f.ns).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return pod
}

// createJob creates a Job of the fixture that does not retry.
func (f *fixture) createJob(name string, spec corev1.PodSpec, mut func(*batchv1.Job)) *batchv1.Job {
	f.t.Helper()
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: f.labels()},
				Spec:       spec,
			},
		},
	}
	if mut != nil {
		mut(job)
	}
	job, err := f.client.BatchV1().Jobs(f.ns).Create(context.Background(), job, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return job
}

func (f *fixture) getPod(name string) (*corev1.Pod, error) {
	return f.client.CoreV1().Pods(f.ns).Get(context.Background(), name, metav1.GetOptions{})
}

// waitPod polls the pod until cond holds.
func (f *fixture) waitPod(name, what string, timeout time.Duration, cond func(*corev1.Pod) (bool, string)) *corev1.Pod {
	f.t.Helper()
	var pod *corev1.Pod
	f.waitFor(fmt.Sprintf("pod %s: %s", name, what), timeout, func() (bool, string) {
		p, err := f.getPod(name)
		if err != nil {
			return false, err.Error()
		}
		pod = p
		return cond(p)
	})
	return pod
}

// waitPhase waits for a pod to reach phase.
func (f *fixture) waitPhase(name string, phase corev1.PodPhase, timeout time.Duration) *corev1.Pod {
	f.t.Helper()
	return f.waitPod(name, "phase "+string(phase), timeout, func(p *corev1.Pod) (bool, string) {
		return p.Status.Phase == phase, describe(p)
	})
}

// waitGone waits until the pod no longer exists.
func (f *fixture) waitGone(name string, timeout time.Duration) {
	f.t.Helper()
	f.waitFor("pod "+name+" to be gone", timeout, func() (bool, string) {
		p, err := f.getPod(name)
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return false, describe(p)
	})
}

// jobPod waits for the single pod of a Job and returns it.
func (f *fixture) jobPod(job *batchv1.Job) *corev1.Pod {
	f.t.Helper()
	var pod *corev1.Pod
	f.waitFor("a pod of job "+job.Name, 30*time.Second, func() (bool, string) {
		pods, err := f.client.CoreV1().Pods(f.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "job-name=" + job.Name})
		if err != nil {
			return false, err.Error()
		}
		if len(pods.Items) != 1 {
			return false, fmt.Sprintf("%d pods", len(pods.Items))
		}
		pod = &pods.Items[0]
		return true, ""
	})
	return pod
}

// waitJobCondition waits for a Job condition to be True and returns it.
func (f *fixture) waitJobCondition(name string, t batchv1.JobConditionType, timeout time.Duration) batchv1.JobCondition {
	f.t.Helper()
	var found batchv1.JobCondition
	f.waitFor(fmt.Sprintf("job %s condition %s", name, t), timeout, func() (bool, string) {
		job, err := f.client.BatchV1().Jobs(f.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range job.Status.Conditions {
			if c.Type == t && c.Status == corev1.ConditionTrue {
				found = c
				return true, ""
			}
		}
		return false, fmt.Sprintf("conditions %v", job.Status.Conditions)
	})
	return found
}

// describe summarizes a pod's status for failure messages.
func describe(p *corev1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s reason=%q node=%q", p.Status.Phase, p.Status.Reason, p.Spec.NodeName)
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, s := range list {
			switch {
			case s.State.Waiting != nil:
				fmt.Fprintf(&b, " %s=waiting(%s: %s)", s.Name, s.State.Waiting.Reason, s.State.Waiting.Message)
			case s.State.Running != nil:
				fmt.Fprintf(&b, " %s=running", s.Name)
			case s.State.Terminated != nil:
				fmt.Fprintf(&b, " %s=terminated(%d %s: %q)", s.Name, s.State.Terminated.ExitCode, s.State.Terminated.Reason, s.State.Terminated.Message)
			}
		}
	}
	return b.String()
}

// containerStatus returns the status of the named container (init or not).
func containerStatus(t *testing.T, p *corev1.Pod, name string) corev1.ContainerStatus {
	t.Helper()
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, s := range list {
			if s.Name == name {
				return s
			}
		}
	}
	t.Fatalf("no status for container %s: %s", name, describe(p))
	return corev1.ContainerStatus{}
}

func podCondition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// podDir is the agent's directory of a pod.
func (f *fixture) podDir(p *corev1.Pod) string {
	return filepath.Join(f.cfg.WorkDir, "pods", string(p.UID))
}

// markerFile is a file outside every pod directory where the helper notes its lifecycle.
func markerFile(t *testing.T) string {
	return filepath.Join(t.TempDir(), "marker")
}

// readMarker returns the marker's lines.
func readMarker(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		lines = append(lines, s.Text())
	}
	return lines
}

// markerPIDs returns the PIDs noted with prefix ("start" or "child").
func markerPIDs(path, prefix string) []int {
	var pids []int
	for _, line := range readMarker(path) {
		if rest, ok := strings.CutPrefix(line, prefix+" "); ok {
			if pid, err := strconv.Atoi(rest); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

func hasLine(lines []string, want string) bool {
	for _, l := range lines {
		if l == want {
			return true
		}
	}
	return false
}

// waitEvent waits for an Event on the object with the reason whose message contains text.
func (f *fixture) waitEvent(name, reason, text string) {
	f.t.Helper()
	f.waitFor(fmt.Sprintf("event %s on %s", reason, name), 30*time.Second, func() (bool, string) {
		events, err := f.client.CoreV1().Events(f.ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range events.Items {
			if e.Reason == reason && strings.Contains(e.Message, text) {
				return true, ""
			}
			seen = append(seen, e.Reason+": "+e.Message)
		}
		return false, strings.Join(seen, "; ")
	})
}

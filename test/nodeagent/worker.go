package nodeagent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// Limits of what a termination message carries, as the kubelet's.
const (
	maxTerminationMessage = 4096
	// fallbackLogBytes and fallbackLogLines bound the log tail of FallbackToLogsOnError.
	fallbackLogBytes = 2048
	fallbackLogLines = 80
)

// Reasons the agent reports.
const (
	// ReasonNodeAgentRestarted marks a pod whose processes were lost because the agent that ran
	// them stopped or crashed; it is Failed, as a pod on a node that lost it.
	ReasonNodeAgentRestarted = "NodeAgentRestarted"
	reasonDeadlineExceeded   = "DeadlineExceeded"
)

// startedMarker is a file in the pod's directory written before its first process starts; an
// agent that finds it (after a restart) knows the pod's processes were lost.
const startedMarker = "started"

// procSpec is one process to start.
type procSpec struct {
	path string
	args []string
	env  []string
	dir  string
	log  *os.File
}

// startError is a container that could not be started; it terminates with StartError.
type startError struct{ err error }

func (e *startError) Error() string { return e.err.Error() }

// podWorker runs one pod: it prepares its volumes, runs its init containers in order and then
// its containers, reports their status and stops them when the pod is deleted.
type podWorker struct {
	a         *Agent
	uid       types.UID
	key       string
	namespace string
	name      string
	dir       string
	log       logr.Logger

	mu sync.Mutex
	// pod is the latest version the informer saw.
	pod  *corev1.Pod
	gone bool
	// changed is closed and replaced on every change of pod, gone or the deadline.
	changed          chan struct{}
	deadlineExceeded bool
	// stopAt is when the worker first saw that the pod must stop; grace periods count from it.
	stopAt time.Time
	// deleted is set once the worker removed the pod from the API.
	deleted bool
	state   podState

	// pubMu orders status writes, so the last write carries the latest state.
	pubMu sync.Mutex

	// kubeconfig is set when the pod's containers get a kubeconfig for in-cluster access.
	kubeconfig   bool
	tokenRenewal time.Time

	// images holds what the pod's image references resolved to in the agent's image map, by
	// reference; guarded by mu.
	images map[string]resolvedImage
	// volumeImages holds the registry images the volume files were rewritten for, by reference,
	// nil for one that could not be had; guarded by mu.
	volumeImages map[string]*resolvedImage
}

// podState is what the worker reports in the pod's status.
type podState struct {
	phase        corev1.PodPhase
	reason       string
	message      string
	startTime    metav1.Time
	sandboxReady bool
	init         []*containerState
	main         []*containerState
	conditions   map[corev1.PodConditionType]corev1.PodCondition
	// events remembers the last event per container and reason, so a waiting pod does not
	// repeat itself every retry.
	events map[string]string
}

// containerState is one container's status.
type containerState struct {
	spec        corev1.Container
	init        bool
	state       corev1.ContainerState
	lastState   corev1.ContainerState
	restarts    int32
	containerID string
	imageID     string
	// ready is the readiness probe's verdict while the container runs; a container without
	// one is ready once it runs.
	ready bool
}

func newPodWorker(a *Agent, key string, pod *corev1.Pod) *podWorker {
	w := &podWorker{
		a:         a,
		uid:       pod.UID,
		key:       key,
		namespace: pod.Namespace,
		name:      pod.Name,
		dir:       a.podDir(pod.UID),
		log:       a.log.WithValues("pod", key, "uid", pod.UID),
		pod:       pod,
		changed:   make(chan struct{}),
	}
	return w
}

// update hands the worker a newer version of its pod.
func (w *podWorker) update(pod *corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pod = pod
	w.notifyLocked()
}

// setGone tells the worker its pod is gone from the API.
func (w *podWorker) setGone() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gone = true
	w.notifyLocked()
}

func (w *podWorker) notifyLocked() {
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *podWorker) latest() (*corev1.Pod, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pod, w.changed
}

// stopInfo reports whether the pod's processes must stop (deletion, removal from the API, or
// spec.activeDeadlineSeconds) and the grace period they get, counted from stopAt.
func (w *podWorker) stopInfo() (stop bool, deadline time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	pod := w.pod
	var grace *int64
	switch {
	case pod.DeletionTimestamp != nil || w.gone:
		grace = pod.DeletionGracePeriodSeconds
		if grace == nil {
			grace = pod.Spec.TerminationGracePeriodSeconds
		}
	case w.deadlineExceeded:
		grace = pod.Spec.TerminationGracePeriodSeconds
	default:
		return false, time.Time{}
	}
	if w.stopAt.IsZero() {
		w.stopAt = time.Now()
	}
	d := 30 * time.Second // the API's default grace period
	if grace != nil {
		d = time.Duration(max(*grace, 0)) * time.Second
	}
	return true, w.stopAt.Add(d)
}

func (w *podWorker) stopping() bool {
	stop, _ := w.stopInfo()
	return stop
}

// sleep waits for d; it returns false early when the pod must stop or the agent stops.
func (w *podWorker) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		_, changed := w.latest()
		if w.stopping() {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		case <-changed:
		}
	}
}

// run runs the pod to its end. When ctx is done (the agent stops) it kills the processes and
// returns without reporting, as a node that goes away reports nothing.
func (w *podWorker) run(ctx context.Context) {
	pod, _ := w.latest()
	if w.lost(pod) {
		w.reportLost(ctx, pod)
		return
	}
	w.initState(pod)
	if d := pod.Spec.ActiveDeadlineSeconds; d != nil {
		timer := time.AfterFunc(time.Duration(*d)*time.Second, func() {
			w.mu.Lock()
			w.deadlineExceeded = true
			w.notifyLocked()
			w.mu.Unlock()
		})
		defer timer.Stop()
	}
	w.report(ctx)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if w.prepare(runCtx) {
		if w.kubeconfig {
			go w.renewTokens(runCtx)
		}
		if w.runInit(runCtx) {
			w.runMain(runCtx)
		}
	}
	if ctx.Err() != nil {
		return
	}
	w.finish(ctx)
}

// initState sets the status a pod starts with: Pending, every container waiting.
func (w *podWorker) initState(pod *corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := &w.state
	st.phase = corev1.PodPending
	st.startTime = metav1.Now()
	if pod.Status.StartTime != nil {
		st.startTime = *pod.Status.StartTime
	}
	st.conditions = map[corev1.PodConditionType]corev1.PodCondition{}
	for _, c := range pod.Status.Conditions {
		st.conditions[c.Type] = c
	}
	st.events = map[string]string{}
	for _, c := range pod.Spec.InitContainers {
		st.init = append(st.init, &containerState{spec: c, init: true, state: waiting(initialReason(pod, true), "")})
	}
	for _, c := range pod.Spec.Containers {
		st.main = append(st.main, &containerState{spec: c, state: waiting(initialReason(pod, false), "")})
	}
}

// initialReason is why a container waits before it starts, as the kubelet says it: the
// containers of a pod with init containers wait for PodInitializing.
func initialReason(pod *corev1.Pod, init bool) string {
	if init || len(pod.Spec.InitContainers) > 0 {
		return "PodInitializing"
	}
	return "ContainerCreating"
}

func waiting(reason, message string) corev1.ContainerState {
	return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}
}

// next returns the containers that start next: the first init container that has not
// completed, else every container.
func (w *podWorker) nextLocked() []*containerState {
	for _, c := range w.state.init {
		if c.state.Terminated == nil || c.state.Terminated.ExitCode != 0 {
			return []*containerState{c}
		}
	}
	return w.state.main
}

// prepare materializes the pod's volumes and, when a container needs one, its kubeconfig. While
// something is missing it waits and retries, as the kubelet's volume setup does. It returns
// false when the pod stopped first.
func (w *podWorker) prepare(ctx context.Context) bool {
	for {
		if ctx.Err() != nil || w.stopping() {
			return false
		}
		pod, _ := w.latest()
		err := w.setup(ctx, pod)
		if err == nil {
			w.mu.Lock()
			w.state.sandboxReady = true
			// What the pod waited on is there now.
			for _, c := range w.nextLocked() {
				if c.state.Waiting != nil {
					c.state = waiting(initialReason(pod, c.init), "")
				}
			}
			w.mu.Unlock()
			w.report(ctx)
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		var we *waitError
		if errors.As(err, &we) {
			reason := "FailedMount"
			if we.reason == "CreateContainerConfigError" {
				reason = "Failed"
			}
			w.mu.Lock()
			for _, c := range w.nextLocked() {
				if we.reason == "CreateContainerConfigError" {
					c.state = waiting(we.reason, we.message)
				} else if c.state.Waiting != nil {
					c.state.Waiting.Message = we.message
				}
			}
			w.mu.Unlock()
			w.event(pod, "", corev1.EventTypeWarning, reason, we.message)
			w.report(ctx)
		} else {
			w.log.Error(err, "preparing the pod")
		}
		if !w.sleep(ctx, w.a.cfg.RetryInterval) {
			return false
		}
	}
}

// setup creates the pod's directories, volumes and kubeconfig.
func (w *podWorker) setup(ctx context.Context, pod *corev1.Pod) error {
	for _, d := range []string{w.dir, filepath.Join(w.dir, "volumes"), filepath.Join(w.dir, "termination")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// The path maps of the containers that mount a volume rewrite its files, when asked to.
	contents := map[string]pathMap{}
	if w.a.cfg.RewriteVolumeFiles {
		byVolume := map[string][]pathMap{}
		for _, c := range allContainers(pod) {
			m := w.pathMapFor(pod, c, w.volumeImage(ctx, pod, c))
			for _, vm := range c.VolumeMounts {
				byVolume[vm.Name] = append(byVolume[vm.Name], m)
			}
		}
		for name, maps := range byVolume {
			contents[name] = mergePathMaps(maps)
		}
	}
	if err := w.materializeVolumes(ctx, pod, contents); err != nil {
		return err
	}
	// A pod that names its ServiceAccount and does not opt out of its token gets the kubeconfig
	// as $KUBECONFIG in place of in-cluster configuration, whose paths are compiled into the
	// clients. (Without the ServiceAccount admission plugin, a pod that names none has none.)
	w.kubeconfig = pod.Spec.ServiceAccountName != "" &&
		(pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken)
	for _, c := range allContainers(pod) {
		if usesInCluster(append(append([]string{}, c.Command...), c.Args...)) {
			w.kubeconfig = true
		}
	}
	if w.kubeconfig {
		if _, err := w.writeKubeconfig(ctx, pod); err != nil {
			return err
		}
	}
	return nil
}

// environ is a process's environment with container paths rewritten, and $KUBECONFIG, a local
// path, added after the rewriting when the pod gets a kubeconfig and no container sets it.
func (w *podWorker) environ(env *envList, pm pathMap) []string {
	environ := make([]string, 0, len(env.vars)+1)
	for _, v := range env.vars {
		environ = append(environ, v.name+"="+pm.env(v.value))
	}
	if _, set := env.get("KUBECONFIG"); !set && w.kubeconfig {
		environ = append(environ, "KUBECONFIG="+w.kubeconfigPath())
	}
	return environ
}

// renewTokens renews the kubeconfig's token at 80% of its life while the pod runs.
func (w *podWorker) renewTokens(ctx context.Context) {
	for {
		t := time.NewTimer(time.Until(w.tokenRenewal))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		pod, _ := w.latest()
		if err := w.renewToken(ctx, pod); err != nil {
			if ctx.Err() != nil {
				return
			}
			w.log.Error(err, "renewing the pod's token")
			w.tokenRenewal = time.Now().Add(w.a.cfg.RetryInterval * 10)
		}
	}
}

func allContainers(pod *corev1.Pod) []*corev1.Container {
	var out []*corev1.Container
	for i := range pod.Spec.InitContainers {
		out = append(out, &pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		out = append(out, &pod.Spec.Containers[i])
	}
	return out
}

// pathMapFor maps the paths a container sees: its termination message file, its volume mounts
// and its image's paths (img, when known), in that priority, as a mount hides what the image
// has at its path. A registry image's /dev, /proc and /sys are the host's, as a runtime mounts
// them.
func (w *podWorker) pathMapFor(pod *corev1.Pod, c *corev1.Container, img *resolvedImage) pathMap {
	var b pathMapBuilder
	if c.TerminationMessagePath != "" {
		b.add(c.TerminationMessagePath, w.terminationPath(c.Name))
	}
	for _, m := range c.VolumeMounts {
		b.add(m.MountPath, w.mountLocal(pod, m))
	}
	if img != nil {
		if img.rootfs {
			for _, p := range hostPaths {
				b.add(p, p)
			}
		}
		for _, in := range sortedKeys(img.Paths) {
			b.add(in, img.Paths[in])
		}
	}
	return b.build()
}

// volumeImage is a container's image as the rewriting of volume files sees it, or nil when it
// cannot be had yet (its container reports why when it starts). A registry image is pulled here,
// under the container's pull policy and once per reference for the pod, since its file system
// must be on disk before a file can name it.
func (w *podWorker) volumeImage(ctx context.Context, pod *corev1.Pod, c *corev1.Container) *resolvedImage {
	if w.a.images.knows(c.Image) {
		img, err := w.image(c.Image)
		if err != nil {
			return nil
		}
		return &img
	}
	w.mu.Lock()
	img, tried := w.volumeImages[c.Image]
	w.mu.Unlock()
	if tried {
		return img
	}
	if pulled, err := w.pull(ctx, pod, c); err == nil {
		img = &pulled
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.volumeImages == nil {
		w.volumeImages = map[string]*resolvedImage{}
	}
	w.volumeImages[c.Image] = img
	return img
}

// containerImage gets the image a container starts with: from the agent's image map when it
// knows the reference (resolved once for the pod), else from the reference's registry under
// the container's pull policy.
func (w *podWorker) containerImage(ctx context.Context, pod *corev1.Pod, c *corev1.Container) (resolvedImage, error) {
	if !w.a.images.knows(c.Image) {
		return w.pull(ctx, pod, c)
	}
	img, err := w.image(c.Image)
	if err == nil {
		w.event(pod, c.Name, corev1.EventTypeNormal, "Pulled", fmt.Sprintf("Container image %q already present on machine", c.Image))
	}
	return img, err
}

// image resolves an image reference of the pod once and keeps the result for the pod's life,
// as a node keeps the image it pulled: the volume files, every container and every restart of
// the pod see one mapping, even when the tag is re-pushed while the pod runs.
func (w *podWorker) image(ref string) (resolvedImage, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if img, ok := w.images[ref]; ok {
		return img, nil
	}
	img, err := w.a.images.resolve(ref)
	if err != nil {
		return resolvedImage{}, err
	}
	if w.images == nil {
		w.images = map[string]resolvedImage{}
	}
	w.images[ref] = img
	return img, nil
}

func (w *podWorker) terminationPath(container string) string {
	return filepath.Join(w.dir, "termination", container)
}

func (w *podWorker) logPath(container string) string {
	return filepath.Join(w.dir, container+".log")
}

// runInit runs the init containers in order; it reports whether all completed.
func (w *podWorker) runInit(ctx context.Context) bool {
	for _, c := range w.state.init {
		if !w.runContainer(ctx, c) {
			return false
		}
	}
	return true
}

// runMain runs the containers side by side until all have ended.
func (w *podWorker) runMain(ctx context.Context) {
	var wg sync.WaitGroup
	for _, c := range w.state.main {
		wg.Go(func() { w.runContainer(ctx, c) })
	}
	wg.Wait()
}

// restartPolicy is the pod's restart policy.
func (w *podWorker) restartPolicy() corev1.RestartPolicy {
	pod, _ := w.latest()
	if pod.Spec.RestartPolicy == "" {
		return corev1.RestartPolicyAlways
	}
	return pod.Spec.RestartPolicy
}

// runContainer runs one container, restarting it as the restart policy says. It reports
// whether the container completed successfully.
func (w *podWorker) runContainer(ctx context.Context, c *containerState) bool {
	backoff := time.Second
	pullBackoff := w.a.cfg.RetryInterval
	for {
		if ctx.Err() != nil || w.stopping() {
			return false
		}
		pod, _ := w.latest()
		img, err := w.containerImage(ctx, pod, &c.spec)
		if err != nil {
			if ctx.Err() != nil || !w.imagePullBackOff(ctx, pod, c, err, pullBackoff) {
				return false
			}
			pullBackoff = min(pullBackoff*2, w.a.cfg.MaxImagePullBackoff)
			continue
		}
		pullBackoff = w.a.cfg.RetryInterval
		spec, err := w.buildProcess(ctx, pod, c, img)
		var we *waitError
		var se *startError
		var code int32
		switch {
		case errors.As(err, &we):
			w.setState(c, waiting(we.reason, we.message))
			w.event(pod, c.spec.Name, corev1.EventTypeWarning, "Failed", "Error: "+we.message)
			w.report(ctx)
			if !w.sleep(ctx, w.a.cfg.RetryInterval) {
				return false
			}
			continue
		case errors.As(err, &se):
			code = w.startFailed(ctx, pod, c, se)
		case err != nil:
			if ctx.Err() != nil {
				return false
			}
			w.log.Error(err, "preparing container", "container", c.spec.Name)
			if !w.sleep(ctx, w.a.cfg.RetryInterval) {
				return false
			}
			continue
		default:
			code = w.execute(ctx, pod, c, spec, img.id)
			if ctx.Err() != nil {
				return false
			}
		}
		if code == 0 && (c.init || w.restartPolicy() != corev1.RestartPolicyAlways) {
			return true
		}
		if !w.restarts(c, code) || w.stopping() {
			return false
		}
		if !w.backOff(ctx, c, backoff) {
			return false
		}
		backoff = min(backoff*2, w.a.cfg.MaxRestartBackoff)
	}
}

// restarts reports whether a container that exited with code starts again. The pod's restart
// policy says so; an init container restarts only after a failure, and never with Never.
func (w *podWorker) restarts(c *containerState, code int32) bool {
	policy := w.restartPolicy()
	if c.init {
		return policy != corev1.RestartPolicyNever && code != 0
	}
	return policy == corev1.RestartPolicyAlways || (policy == corev1.RestartPolicyOnFailure && code != 0)
}

// backOff reports c waiting in CrashLoopBackOff before its next start and waits backoff; it
// returns false when the pod must stop or the agent stops first.
func (w *podWorker) backOff(ctx context.Context, c *containerState, backoff time.Duration) bool {
	w.mu.Lock()
	c.lastState = c.state
	c.restarts++
	c.state = waiting("CrashLoopBackOff", fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s", backoff, c.spec.Name, w.name, w.namespace))
	w.mu.Unlock()
	w.report(ctx)
	return w.sleep(ctx, backoff)
}

func (w *podWorker) setState(c *containerState, s corev1.ContainerState) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c.state = s
}

// buildProcess resolves a container's environment, command and working directory, with
// container paths rewritten to local ones. As in Kubernetes, the container's command replaces
// the image's entrypoint and its args the image's cmd (a command alone drops the cmd), the
// image's env comes first and the container's overrides it, and the image's working directory
// applies when the container sets none. $(VAR) references in the container's command, args and
// env see the container's env only.
func (w *podWorker) buildProcess(ctx context.Context, pod *corev1.Pod, c *containerState, img resolvedImage) (procSpec, error) {
	spec := &c.spec
	if c.init && spec.RestartPolicy != nil && *spec.RestartPolicy == corev1.ContainerRestartPolicyAlways {
		return procSpec{}, configError("sidecar init containers (restartPolicy Always) are not supported by the node agent")
	}
	if spec.TTY || spec.Stdin {
		return procSpec{}, configError("tty and stdin are not supported by the node agent")
	}
	env, err := w.containerEnv(ctx, pod, spec, &objectCache{w: w})
	if err != nil {
		return procSpec{}, err
	}
	pm := w.pathMapFor(pod, spec, &img)
	expandAll := func(in []string) []string {
		out := make([]string, len(in))
		for i, a := range in {
			out[i] = expand(a, env.lookup)
		}
		return out
	}
	command, args := expandAll(spec.Command), expandAll(spec.Args)
	if len(command) == 0 {
		command = img.Command
		if len(args) == 0 {
			args = img.cmd
		}
	}
	argv := append(append([]string{}, command...), args...)
	if len(argv) == 0 {
		return procSpec{}, &startError{errors.New("no command specified: the container has none and the image gives none")}
	}
	for i := range argv {
		argv[i] = pm.arg(argv[i])
	}
	// After the path rewriting, which must not touch the local kubeconfig path.
	if w.kubeconfig {
		argv, _ = rewriteInCluster(argv, w.kubeconfigPath())
	}
	environ := w.environ(w.processEnv(pod, img.env, env), pm)
	dir := w.dir
	if wd := cmp.Or(spec.WorkingDir, img.workingDir); wd != "" {
		dir, _ = pm.path(wd)
	}
	pathEnv := ""
	for _, e := range environ {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			pathEnv = v
		}
	}
	bin, err := lookPath(argv[0], pathEnv, dir)
	if err != nil {
		return procSpec{}, &startError{err}
	}
	// As in a container, only a program of the image or of a volume runs, never one that
	// happens to be on this machine.
	if !pm.contains(bin) {
		return procSpec{}, &startError{fmt.Errorf("exec: %q resolves to %s, which is neither in the image %q nor in a volume", argv[0], bin, c.spec.Image)}
	}
	return procSpec{path: bin, args: argv, env: environ, dir: dir}, nil
}

// lookPath finds the executable of a command in the container's PATH, not the agent's.
func lookPath(file, pathEnv, dir string) (string, error) {
	resolve := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	if strings.Contains(file, "/") {
		p := resolve(file)
		if err := executable(p); err != nil {
			return "", fmt.Errorf("exec: %q: %w", file, err)
		}
		return p, nil
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "."
		}
		p := resolve(filepath.Join(d, file))
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec: %q: executable file not found in $PATH", file)
}

func executable(p string) error {
	info, err := os.Stat(p)
	if err != nil {
		return err
	}
	if info.IsDir() || info.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

// execute starts a container's process, waits for it (stopping it when the pod must stop) and
// reports its end, with imageID as the container's image ID. It returns the exit code.
func (w *podWorker) execute(ctx context.Context, pod *corev1.Pod, c *containerState, spec procSpec, imageID string) int32 {
	name := c.spec.Name
	fail := func(err error) int32 { return w.startFailed(ctx, pod, c, err) }
	logFile, err := os.OpenFile(w.logPath(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fail(err)
	}
	defer logFile.Close()
	// A fresh, empty termination message file per start; world-writable like the kubelet's.
	term := w.terminationPath(name)
	if err := os.WriteFile(term, nil, 0o666); err != nil {
		return fail(err)
	}
	if err := os.Chmod(term, 0o666); err != nil {
		return fail(err)
	}
	if err := os.WriteFile(filepath.Join(w.dir, startedMarker), nil, 0o644); err != nil {
		return fail(err)
	}
	spec.log = logFile
	p, err := startProcess(spec)
	if err != nil {
		return fail(err)
	}
	started := metav1.Now()
	w.mu.Lock()
	c.containerID = fmt.Sprintf("local-process://%d", p.Pid())
	c.imageID = imageID
	c.state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}
	c.ready = c.spec.ReadinessProbe == nil
	if !c.init && w.state.phase == corev1.PodPending {
		w.state.phase = corev1.PodRunning
	}
	w.mu.Unlock()
	w.event(pod, name, corev1.EventTypeNormal, "Started", "Started container "+name)
	w.log.V(1).Info("started container", "container", name, "pid", p.Pid(), "args", spec.args)
	w.report(ctx)
	if !c.init {
		w.probeContainer(ctx, pod, c, p)
	}

	w.waitProcess(ctx, pod, c, p)
	if ctx.Err() != nil {
		return 137
	}
	code, signal := p.exitStatus()
	message := readTermination(term)
	if message == "" && code != 0 && c.spec.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError {
		message = logTail(w.logPath(name))
	}
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	w.setState(c, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: code, Signal: signal, Reason: reason, Message: message,
		StartedAt: started, FinishedAt: metav1.Now(), ContainerID: c.containerID,
	}})
	w.log.V(1).Info("container exited", "container", name, "exitCode", code)
	w.report(ctx)
	return code
}

// startFailed reports a container that could not start, as a runtime does: terminated with
// StartError and exit code 128.
func (w *podWorker) startFailed(ctx context.Context, pod *corev1.Pod, c *containerState, err error) int32 {
	now := metav1.Now()
	w.setState(c, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: 128, Reason: "StartError", Message: err.Error(), StartedAt: now, FinishedAt: now,
	}})
	w.event(pod, c.spec.Name, corev1.EventTypeWarning, "Failed", "Error: "+err.Error())
	w.report(ctx)
	return 128
}

// waitProcess waits for a process to exit. When the pod must stop it sends SIGTERM to the
// process group and, after the grace period, kills the whole tree; when the agent stops it
// kills the tree at once.
func (w *podWorker) waitProcess(ctx context.Context, pod *corev1.Pod, c *containerState, p *process) {
	var timer *time.Timer
	var timeout <-chan time.Time
	var deadline time.Time
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		_, changed := w.latest()
		if stop, d := w.stopInfo(); stop {
			if timer == nil {
				w.event(pod, c.spec.Name, corev1.EventTypeNormal, "Killing", "Stopping container "+c.spec.Name)
				p.terminate()
				deadline = d
				timer = time.NewTimer(time.Until(d))
				timeout = timer.C
			} else if d.Before(deadline) {
				// A second deletion with a shorter grace period shortens the wait.
				deadline = d
				timer.Reset(time.Until(d))
			}
		}
		select {
		case <-p.Done():
			return
		case <-ctx.Done():
			p.kill()
			<-p.Done()
			return
		case <-timeout:
			p.kill()
			<-p.Done()
			return
		case <-changed:
		}
	}
}

// readTermination reads a termination message: at most its first 4096 bytes.
func readTermination(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	data, _ := io.ReadAll(io.LimitReader(f, maxTerminationMessage))
	return string(data)
}

// logTail is the end of a container's log, for FallbackToLogsOnError.
func logTail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(data) > fallbackLogBytes {
		data = data[len(data)-fallbackLogBytes:]
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > fallbackLogLines {
		lines = lines[len(lines)-fallbackLogLines:]
	}
	return strings.Join(lines, "\n")
}

// finish reports the pod's end, removes its volumes and, when the pod is being deleted,
// completes the deletion.
func (w *podWorker) finish(ctx context.Context) {
	policy := w.restartPolicy()
	w.mu.Lock()
	succeeded := len(w.state.main) > 0 && policy != corev1.RestartPolicyAlways
	for _, c := range w.state.main {
		if c.state.Terminated == nil || c.state.Terminated.ExitCode != 0 {
			succeeded = false
		}
	}
	w.state.phase = corev1.PodFailed
	if succeeded {
		w.state.phase = corev1.PodSucceeded
	}
	if w.deadlineExceeded && !succeeded {
		w.state.reason = reasonDeadlineExceeded
		w.state.message = "Pod was active on the node longer than the specified deadline"
	}
	pod, gone := w.pod, w.gone
	w.mu.Unlock()
	if !gone {
		if err := w.publish(ctx, 30); err != nil {
			w.log.Error(err, "reporting the pod's end")
		}
	}
	w.removeVolumes()
	w.completeDeletion(ctx, pod)
}

// completeDeletion removes a pod that is being deleted from the API, now that its processes are
// gone.
func (w *podWorker) completeDeletion(ctx context.Context, pod *corev1.Pod) {
	w.mu.Lock()
	latest, gone := w.pod, w.gone
	w.mu.Unlock()
	if latest != nil {
		pod = latest
	}
	if gone || pod.DeletionTimestamp == nil {
		return
	}
	if err := retry(ctx, 10, func() error { return w.a.deletePod(ctx, pod) }); err != nil {
		w.log.Error(err, "completing the pod's deletion")
		return
	}
	w.mu.Lock()
	w.deleted = true
	w.mu.Unlock()
}

// removeVolumes removes what a finished pod no longer needs; its logs stay until the pod is
// gone from the API.
func (w *podWorker) removeVolumes() {
	for _, d := range []string{"volumes", "termination", "kube"} {
		_ = os.RemoveAll(filepath.Join(w.dir, d))
	}
}

// lost reports whether the pod's processes were started by an earlier agent: its status or
// its directory says a container started, and this agent has no process for it.
func (w *podWorker) lost(pod *corev1.Pod) bool {
	if _, err := os.Stat(filepath.Join(w.dir, startedMarker)); err == nil {
		return true
	}
	if pod.Status.Phase == corev1.PodRunning {
		return true
	}
	for _, s := range append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		if s.State.Running != nil || s.State.Terminated != nil || s.LastTerminationState.Terminated != nil {
			return true
		}
	}
	return false
}

// reportLost marks a pod whose processes are gone Failed, as a node that lost its pods does:
// every container that had not ended ends with ContainerStatusUnknown.
func (w *podWorker) reportLost(ctx context.Context, pod *corev1.Pod) {
	w.log.Info("the pod's processes were lost; marking it Failed")
	now := metav1.Now()
	status := pod.Status.DeepCopy()
	end := func(statuses []corev1.ContainerStatus) {
		for i := range statuses {
			s := &statuses[i]
			if s.State.Terminated != nil {
				continue
			}
			startedAt := now
			if s.State.Running != nil {
				startedAt = s.State.Running.StartedAt
			}
			s.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 137, Reason: "ContainerStatusUnknown",
				Message:   "The container could not be located when the pod was terminated",
				StartedAt: startedAt, FinishedAt: now, ContainerID: s.ContainerID,
			}}
			s.Ready = false
			s.Started = ptr.To(false)
		}
	}
	end(status.InitContainerStatuses)
	end(status.ContainerStatuses)
	status.Phase = corev1.PodFailed
	status.Reason = ReasonNodeAgentRestarted
	status.Message = "The captf node agent restarted; the pod's processes were lost"
	var conds []corev1.PodCondition
	for _, t := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady, corev1.PodReadyToStartContainers} {
		conds = append(conds, corev1.PodCondition{Type: t, Status: corev1.ConditionFalse, Reason: "PodFailed", LastTransitionTime: now})
	}
	status.Conditions = conds
	w.event(pod, "", corev1.EventTypeWarning, ReasonNodeAgentRestarted, status.Message)
	err := retry(ctx, 30, func() error { return w.patchStatus(ctx, *status) })
	if err != nil && ctx.Err() == nil {
		w.log.Error(err, "marking a lost pod Failed")
	}
	w.removeVolumes()
	w.completeDeletion(ctx, pod)
}

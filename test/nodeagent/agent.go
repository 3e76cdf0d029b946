package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
)

// Component is the agent's name in Events and its user agent.
const Component = "captf-nodeagent"

// Run registers the Node, binds the selected unscheduled pods to it and runs the pods bound to
// it as local processes, until ctx is done. It then kills every process it started, waits for
// them to be gone, marks the Node not ready and returns nil. It returns an error only when it
// cannot start: a bad Config, or an API server that refuses the Node. It is New followed by
// Agent.Run; use those to push images while the agent runs.
func Run(ctx context.Context, cfg Config) error {
	a, err := New(cfg)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// New checks cfg and returns an agent that knows cfg.Images, ready to Run.
func New(cfg Config) (*Agent, error) {
	cfg, err := cfg.complete()
	if err != nil {
		return nil, fmt.Errorf("nodeagent: invalid config: %w", err)
	}
	restConfig := rest.CopyConfig(cfg.RESTConfig)
	restConfig.UserAgent = Component
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return nil, fmt.Errorf("nodeagent: creating the client: %w", err)
	}
	a := &Agent{
		cfg:      cfg,
		client:   client,
		log:      cfg.Log.WithValues("node", cfg.NodeName),
		images:   newRegistry(),
		pulled:   newImageStore(filepath.Join(cfg.WorkDir, "images"), cfg.Mirrors),
		workers:  map[types.UID]*podWorker{},
		finished: map[types.UID]*finishedPod{},
	}
	for ref, img := range cfg.Images {
		a.images.push(ref, img)
	}
	return a, nil
}

// Agent is one node agent, made by New. Its methods are safe for concurrent use.
type Agent struct {
	cfg      Config
	client   kubernetes.Interface
	log      logr.Logger
	recorder record.EventRecorder
	// images is what the image references of Config.Images stand for; PushImage changes it
	// while pods run.
	images *registry
	// pulled holds the images pulled from registries, for every other reference.
	pulled *imageStore
	// started makes a second Run fail: the queues and informers serve one run.
	started atomic.Bool

	nodePods    cache.SharedIndexInformer
	unscheduled cache.SharedIndexInformer
	bindQueue   workqueue.TypedRateLimitingInterface[string]
	syncQueue   workqueue.TypedRateLimitingInterface[string]

	// logsPort is where the agent serves container logs, reported as the kubelet endpoint.
	logsPort int32

	mu sync.Mutex
	// workers run the pods whose processes this agent owns, by UID.
	workers map[types.UID]*podWorker
	// finished are pods this agent is done running; they are forgotten once gone from the API.
	finished  map[types.UID]*finishedPod
	workersWG sync.WaitGroup
}

// Run runs the agent until ctx is done, as the package's Run does. An Agent runs once; a
// second call returns an error.
func (a *Agent) Run(ctx context.Context) error {
	if !a.started.CompareAndSwap(false, true) {
		return errors.New("nodeagent: the agent has already run")
	}
	// The queues start goroutines, so they are made here rather than in New.
	a.bindQueue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodeagent-bind"})
	a.syncQueue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodeagent-sync"})
	return a.run(ctx)
}

// finishedPod remembers a pod the agent no longer runs.
type finishedPod struct {
	key string
	// deleted is set once the agent asked to remove the pod, so it asks once.
	deleted bool
}

func (a *Agent) podsDir() string { return filepath.Join(a.cfg.WorkDir, "pods") }

func (a *Agent) podDir(uid types.UID) string { return filepath.Join(a.podsDir(), string(uid)) }

// ContainerLogPath is the file the agent writes a container's output to, while the pod is
// bound to its Node.
func (a *Agent) ContainerLogPath(uid types.UID, container string) string {
	return filepath.Join(a.podDir(uid), container+".log")
}

func (a *Agent) run(ctx context.Context) error {
	if err := os.MkdirAll(a.podsDir(), 0o755); err != nil {
		return fmt.Errorf("nodeagent: %w", err)
	}
	a.pulled.removeUnfinished()
	port, err := a.serveLogs(ctx)
	if err != nil {
		return fmt.Errorf("nodeagent: serving logs: %w", err)
	}
	a.logsPort = int32(port)
	if err := a.registerNode(ctx); err != nil {
		return fmt.Errorf("nodeagent: registering node %s: %w", a.cfg.NodeName, err)
	}
	a.log.Info("node registered")

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: a.client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	a.recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: Component, Host: a.cfg.NodeName})

	a.nodePods = a.podInformer(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", a.cfg.NodeName).String()
	})
	a.unscheduled = a.podInformer(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", "").String()
		if !a.cfg.BindAllPods {
			o.LabelSelector = a.cfg.PodSelector
		}
	})
	enqueue := func(q workqueue.TypedRateLimitingInterface[string]) cache.ResourceEventHandlerFuncs {
		add := func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				q.Add(key)
			}
		}
		return cache.ResourceEventHandlerFuncs{AddFunc: add, UpdateFunc: func(_, obj any) { add(obj) }, DeleteFunc: add}
	}
	if _, err := a.nodePods.AddEventHandler(enqueue(a.syncQueue)); err != nil {
		return fmt.Errorf("nodeagent: %w", err)
	}
	if _, err := a.unscheduled.AddEventHandler(enqueue(a.bindQueue)); err != nil {
		return fmt.Errorf("nodeagent: %w", err)
	}

	var wg sync.WaitGroup
	wg.Go(func() { a.nodePods.RunWithContext(ctx) })
	wg.Go(func() { a.unscheduled.RunWithContext(ctx) })
	if cache.WaitForCacheSync(ctx.Done(), a.nodePods.HasSynced, a.unscheduled.HasSynced) {
		a.removeStaleDirs()
		wg.Go(func() { a.heartbeat(ctx) })
		wg.Go(func() {
			for a.processBind(ctx) {
			}
		})
		wg.Go(func() {
			for a.processSync(ctx) {
			}
		})
	}
	<-ctx.Done()
	a.bindQueue.ShutDown()
	a.syncQueue.ShutDown()
	wg.Wait()
	// Every worker kills its processes when ctx is done; wait until they are gone.
	a.workersWG.Wait()
	a.markNodeStopped()
	a.log.Info("stopped")
	return nil
}

func (a *Agent) podInformer(modify func(*metav1.ListOptions)) cache.SharedIndexInformer {
	pods := a.client.CoreV1().Pods(metav1.NamespaceAll)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			modify(&o)
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			modify(&o)
			return pods.Watch(ctx, o)
		},
	}
	return cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
}

// removeStaleDirs removes the directories of pods that are no longer bound to this Node, left by
// an earlier run of the agent.
func (a *Agent) removeStaleDirs() {
	entries, err := os.ReadDir(a.podsDir())
	if err != nil {
		return
	}
	known := map[string]bool{}
	for _, obj := range a.nodePods.GetStore().List() {
		known[string(obj.(*corev1.Pod).UID)] = true
	}
	for _, e := range entries {
		if !known[e.Name()] {
			_ = os.RemoveAll(filepath.Join(a.podsDir(), e.Name()))
		}
	}
}

// processBind binds one unscheduled pod to the Node; no scheduler runs beside the agent.
func (a *Agent) processBind(ctx context.Context) bool {
	key, shutdown := a.bindQueue.Get()
	if shutdown {
		return false
	}
	defer a.bindQueue.Done(key)
	obj, exists, err := a.unscheduled.GetStore().GetByKey(key)
	if err != nil || !exists {
		a.bindQueue.Forget(key)
		return true
	}
	pod := obj.(*corev1.Pod)
	if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil || len(pod.Spec.SchedulingGates) > 0 {
		a.bindQueue.Forget(key)
		return true
	}
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: a.cfg.NodeName},
	}
	err = a.client.CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{})
	switch {
	case err == nil:
		a.recorder.Eventf(pod, corev1.EventTypeNormal, "Scheduled", "Successfully assigned %s/%s to %s", pod.Namespace, pod.Name, a.cfg.NodeName)
		a.log.V(1).Info("bound pod", "pod", key)
		a.bindQueue.Forget(key)
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		// Gone, or bound by someone else meanwhile.
		a.bindQueue.Forget(key)
	case ctx.Err() != nil:
	default:
		a.log.Error(err, "binding pod", "pod", key)
		a.bindQueue.AddRateLimited(key)
	}
	return true
}

// processSync reconciles one pod of the Node: it starts a worker for a new pod, passes updates
// to a running worker and finalizes the deletion of pods that no longer run.
func (a *Agent) processSync(ctx context.Context) bool {
	key, shutdown := a.syncQueue.Get()
	if shutdown {
		return false
	}
	defer a.syncQueue.Done(key)
	if err := a.sync(ctx, key); err != nil && ctx.Err() == nil {
		a.log.Error(err, "syncing pod", "pod", key)
		a.syncQueue.AddRateLimited(key)
		return true
	}
	a.syncQueue.Forget(key)
	return true
}

func (a *Agent) sync(ctx context.Context, key string) error {
	obj, exists, err := a.nodePods.GetStore().GetByKey(key)
	if err != nil {
		return err
	}
	var pod *corev1.Pod
	if exists {
		pod = obj.(*corev1.Pod)
	}

	a.mu.Lock()
	// A worker whose pod is gone from the API (or replaced by one of the same name) stops.
	for uid, w := range a.workers {
		if w.key == key && (pod == nil || pod.UID != uid) {
			w.setGone()
		}
	}
	if pod == nil {
		var gone []types.UID
		for uid, f := range a.finished {
			if f.key == key {
				gone = append(gone, uid)
			}
		}
		for _, uid := range gone {
			delete(a.finished, uid)
		}
		a.mu.Unlock()
		for _, uid := range gone {
			// As the kubelet removes a deleted pod's logs and volumes.
			_ = os.RemoveAll(a.podDir(uid))
		}
		return nil
	}
	if w := a.workers[pod.UID]; w != nil {
		a.mu.Unlock()
		w.update(pod)
		return nil
	}
	f := a.finished[pod.UID]
	if f == nil && !isTerminal(pod) {
		if ctx.Err() != nil {
			a.mu.Unlock()
			return nil
		}
		w := newPodWorker(a, key, pod)
		a.workers[pod.UID] = w
		a.workersWG.Add(1)
		a.mu.Unlock()
		go func() {
			defer a.workersWG.Done()
			w.run(ctx)
			a.workerDone(w)
		}()
		return nil
	}
	if f == nil {
		f = &finishedPod{key: key}
		a.finished[pod.UID] = f
	}
	remove := pod.DeletionTimestamp != nil && !f.deleted
	a.mu.Unlock()
	if remove {
		// The pod ran to its end (or never ran here); nothing is left to stop, so the deletion
		// can be completed at once, as the kubelet does once a pod's containers are gone.
		if err := a.deletePod(ctx, pod); err != nil {
			return err
		}
		a.mu.Lock()
		f.deleted = true
		a.mu.Unlock()
	}
	return nil
}

// workerDone forgets a worker and has the agent look at its pod once more, which completes a
// deletion that happened while the worker ran.
func (a *Agent) workerDone(w *podWorker) {
	a.mu.Lock()
	delete(a.workers, w.uid)
	a.finished[w.uid] = &finishedPod{key: w.key, deleted: w.deleted}
	a.mu.Unlock()
	a.syncQueue.Add(w.key)
}

// deletePod removes a pod from the API with grace period 0, once its processes are gone.
func (a *Agent) deletePod(ctx context.Context, pod *corev1.Pod) error {
	err := a.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      metav1.NewUIDPreconditions(string(pod.UID)),
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

func isTerminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// retry runs fn until it succeeds, ctx is done or attempts run out, backing off between tries.
func retry(ctx context.Context, attempts int, fn func() error) error {
	delay := 100 * time.Millisecond
	var err error
	for i := 0; i < attempts; i++ {
		if err = fn(); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		if delay < 5*time.Second {
			delay *= 2
		}
	}
	return err
}

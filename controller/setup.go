package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	eventsclient "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/identity"
	captfcache "github.com/captf/captf/controller/internal/cache"
	"github.com/captf/captf/controller/metrics"
	"github.com/captf/captf/controller/recorder"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/runkey"
)

// Options configure the reconcilers.
type Options struct {
	// RunnerImage is the image of the Jobs' runner init container.
	RunnerImage string
	// Concurrency is how many objects of each kind are reconciled at once.
	Concurrency int
	// Clock is the time source; nil means the real clock.
	Clock clock.PassiveClock
	// Registry takes the controller's metrics; nil means controller-runtime's registry, which
	// the manager serves.
	Registry prometheus.Registerer
	// UnguardedApprovals acts on approval annotations without reading whether the approval
	// policy keeps them to the runs API server (--require-approval-policy=false).
	UnguardedApprovals bool
	// Jobs is the cache of managed Jobs; nil: Setup makes one and adds it to the manager.
	Jobs *captfcache.JobCache
	// Namespace is the namespace the controller runs in, the only one whose Secrets a
	// TerraformClusterIdentity lends; "" lends none. It also keeps the run key (RunKeySecret).
	Namespace string
	// AllowedImages are the module images the install runs (jobs.ImageAllowed); nil allows
	// every image.
	AllowedImages []string
	// RunKey signs the controller's Jobs and durable inputs; nil: Setup reads it from
	// RunKeySecret in Namespace, creating it on first use, or, without a Namespace, makes one
	// that lives as long as the process.
	RunKey *runkey.Key
	// Scope is what the controller reconciles; the manager's cache must follow the same Scope
	// (ManagerOptions).
	Scope Scope
}

// Scope narrows what one controller reconciles, as Cluster API's managers do with --namespace
// and --watch-filter, so that several controllers can share a cluster. The zero Scope is
// everything.
type Scope struct {
	// Namespace is the one namespace whose objects the controller caches and reconciles and
	// whose Jobs it follows; "" is every namespace.
	Namespace string
	// WatchFilter, when set, is the value of Cluster API's watch label (clusterv1.WatchLabel)
	// that the TerraformClusters, TerraformMachines and TerraformMachinePools the controller
	// reconciles carry; their Jobs carry it after them. Cluster API's objects and the
	// cluster-scoped identities are read whatever their labels.
	WatchFilter string
}

// Validate reports a Namespace that cannot name a namespace and a WatchFilter that cannot be a
// label value.
func (s Scope) Validate() error {
	if s.Namespace != "" {
		if errs := validation.IsDNS1123Label(s.Namespace); len(errs) > 0 {
			return fmt.Errorf("namespace %q: %s", s.Namespace, strings.Join(errs, "; "))
		}
	}
	if errs := validation.IsValidLabelValue(s.WatchFilter); len(errs) > 0 {
		return fmt.Errorf("watch filter %q: %s", s.WatchFilter, strings.Join(errs, "; "))
	}
	return nil
}

// watchLabels are the labels the captf objects and Jobs of the scope carry: nil without a watch
// filter.
func (s Scope) watchLabels() map[string]string {
	if s.WatchFilter == "" {
		return nil
	}
	return map[string]string{clusterv1.WatchLabel: s.WatchFilter}
}

// NewScheme returns a scheme with the kinds the controller reads and writes.
func NewScheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(infrav1.AddToScheme(scheme))
	// Cluster API's Clusters, Machines and MachinePools own the objects and wake them.
	utilruntime.Must(clusterv1.AddToScheme(scheme))
	return scheme
}

// ManagerOptions returns the cache and client settings the reconcilers rely on: Secrets,
// Leases and Pods are always read from the API server, so a decision never rests on a stale
// Secret or Lease and the cache holds no Secret data; of the managed Secrets and Leases only the
// metadata is cached, and of Cluster API's Clusters only what captfcache.SlimCluster keeps. The
// cache holds only what scope reconciles (see scopeCache).
func ManagerOptions(opts ctrl.Options, scope Scope) ctrl.Options {
	managed := labels.SelectorFromSet(labels.Merge(labels.Set{jobs.LabelManaged: jobs.ManagedValue}, scope.watchLabels()))
	// The reconcilers read and watch Jobs through their own JobCache, never through the
	// manager's; should anything list Jobs here, it gets managed ones slimmed all the same.
	opts.Cache.ByObject = map[client.Object]cache.ByObject{
		&batchv1.Job{}: {Label: managed, Transform: captfcache.Chain(captfcache.SlimJob, captfcache.Intern)},
		// Of a Cluster, a pass reads its pause, its control plane's readiness and endpoint.
		&clusterv1.Cluster{}: {Transform: captfcache.Chain(captfcache.SlimCluster, captfcache.Intern)},
	}
	// Of managed Secrets, Leases and runner identities a pass reads the metadata only (the
	// reconcilers read them as PartialObjectMetadata), so no Secret data is cached.
	for gvk, selector := range workspace.MetadataSelectors() {
		opts.Cache.ByObject[metadataOf(gvk)] = cache.ByObject{Label: selector, Transform: captfcache.Chain(captfcache.SlimMetadata, captfcache.StripUnread, captfcache.Intern)}
	}
	// Nothing reads managed fields or last-applied configurations; for a Job the managed fields
	// are a large part of what the cache holds.
	opts.Cache.DefaultTransform = captfcache.Chain(captfcache.StripUnread, captfcache.Intern)
	opts.Client.Cache = &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}, &coordinationv1.Lease{}, &corev1.Pod{}, &corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}}}
	scopeCache(&opts.Cache, scope)
	return opts
}

// scopeCache narrows the cache to scope. A namespace is every namespaced kind's: the ByObject
// entries name none, so they inherit it, and the cluster-scoped identities stay cached whole. A
// watch filter selects the captf kinds only: Cluster API's Clusters, Machines and MachinePools
// are read as owners whatever their labels, and identities are shared by every controller. A
// request for an object the filter leaves out (from a Cluster, Secret or Job watch) then reads
// NotFound and ends.
func scopeCache(opts *cache.Options, scope Scope) {
	if scope.Namespace != "" {
		opts.DefaultNamespaces = map[string]cache.Config{scope.Namespace: {}}
	}
	if watched := scope.watchLabels(); watched != nil {
		for _, kind := range infrav1.Kinds {
			opts.ByObject[kind.New()] = cache.ByObject{Label: labels.SelectorFromSet(watched)}
		}
	}
}

// NewJobCache returns the Job cache of scope: the managed Jobs of its namespace that carry its
// watch filter's label, those the reconcilers of scope run.
func NewJobCache(cfg *rest.Config, scope Scope) (*captfcache.JobCache, error) {
	return captfcache.NewJobCache(cfg, scope.Namespace, scope.watchLabels())
}

// metadataOf is the metadata-only form of a kind, for cache options.
func metadataOf(gvk schema.GroupVersionKind) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(gvk)
	return m
}

// Setup registers the three reconcilers and the controller's metrics with the manager.
func Setup(mgr ctrl.Manager, opts Options) error {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 10
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Registry == nil {
		opts.Registry = ctrlmetrics.Registry
	}
	jobCache := opts.Jobs
	if jobCache == nil {
		var err error
		if jobCache, err = NewJobCache(mgr.GetConfig(), opts.Scope); err != nil {
			return err
		}
	}
	if err := mgr.Add(jobCache); err != nil {
		return fmt.Errorf("adding the Job cache: %w", err)
	}
	m, err := metrics.New(opts.Registry, metrics.ActiveJobs(jobCache))
	if err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	if err := metrics.RegisterPlans(opts.Registry, metrics.PlansAwaitingApproval(mgr.GetCache(), opts.Clock)); err != nil {
		return fmt.Errorf("registering the metrics of plans awaiting approval: %w", err)
	}
	events, err := newRecorder(mgr)
	if err != nil {
		return err
	}
	if err := readyOnceCached(mgr, jobCache.HasSynced); err != nil {
		return err
	}
	runKey, err := setupRunKey(mgr, opts)
	if err != nil {
		return err
	}
	if err := metrics.RegisterBackoff(opts.Registry, metrics.BackoffWindowsOpen(mgr.GetCache(), jobCache.AppendOwnerJobs, func(labelled []batchv1.Job, obj client.Object) []batchv1.Job {
		return workspace.OwnRuns(labelled, obj, runKey)
	}, opts.Clock)); err != nil {
		return fmt.Errorf("registering the metrics of backoff windows: %w", err)
	}
	base := workspace.Reconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Jobs:      jobCache,
		// The client bypasses the cache for Secrets, metadata included (DisableFor matches by
		// kind), so the metadata is read from the cache itself.
		Metadata:    mgr.GetCache(),
		Recorder:    events,
		Clock:       opts.Clock,
		Metrics:     m,
		RunnerImage: opts.RunnerImage,
		RunKey:      runKey,

		AllowedImages: opts.AllowedImages,

		ControllerNamespace: opts.Namespace,
	}
	if !opts.UnguardedApprovals {
		base.Approvals = &workspace.PolicyGuard{Reader: mgr.GetAPIReader(), Clock: opts.Clock, TTL: workspace.ApprovalPolicyTTL}
	}
	for _, kind := range infrav1.Kinds {
		r := workspace.New(base, kind)
		if err := r.SetupWithManager(mgr, opts.Concurrency); err != nil {
			return fmt.Errorf("setting up the %s reconciler: %w", r.Kind, err)
		}
	}
	identities := &identity.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: base.Recorder, Clock: opts.Clock, Namespace: opts.Namespace}
	if err := identities.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the TerraformClusterIdentity reconciler: %w", err)
	}
	return nil
}

// setupRunKey returns the run key of opts, read or made as Options.RunKey says.
func setupRunKey(mgr ctrl.Manager, opts Options) (*runkey.Key, error) {
	if opts.RunKey != nil {
		return opts.RunKey, nil
	}
	var key runkey.Key
	var err error
	if opts.Namespace == "" {
		mgr.GetLogger().Info("no controller namespace: the run key lives as long as this process, and a restart stops trusting the Jobs it signed")
		key, err = runkey.New()
	} else {
		direct, cerr := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(), HTTPClient: mgr.GetHTTPClient()})
		if cerr != nil {
			return nil, fmt.Errorf("making a client for the run key: %w", cerr)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		key, err = LoadRunKey(ctx, direct, opts.Namespace, opts.Scope.Namespace)
	}
	if err != nil {
		return nil, err
	}
	return &key, nil
}

// ReportingController is the name the controller's events give as their reporting controller.
const ReportingController = "captf-controller"

// newRecorder makes the controller's event recorder and adds it to the manager, which starts
// it. Its reporting instance is ReportingController and the host's name (the pod's), as
// client-go names it.
func newRecorder(mgr ctrl.Manager) (*recorder.Recorder, error) {
	c, err := eventsclient.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, fmt.Errorf("making the events client: %w", err)
	}
	host, _ := os.Hostname()
	r := recorder.New(c, mgr.GetScheme(), ReportingController, ReportingController+"-"+host, nil, mgr.GetLogger().WithName("events"))
	if err := mgr.Add(r); err != nil {
		return nil, fmt.Errorf("adding the event recorder: %w", err)
	}
	return r, nil
}

// cachedKinds are the kinds the reconcilers read from the manager's cache.
func cachedKinds() []client.Object {
	objs := []client.Object{&infrav1.TerraformClusterIdentity{}, &clusterv1.Cluster{}, &clusterv1.Machine{}, &clusterv1.MachinePool{}}
	for _, kind := range infrav1.Kinds {
		objs = append(objs, kind.New())
	}
	for _, gvk := range workspace.MetadataKinds {
		objs = append(objs, metadataOf(gvk))
	}
	return objs
}

// readyOnceCached makes the manager's cache hold every kind of cachedKinds from its start, on
// every replica, and adds the readiness check "caches": ready once they and the caches that
// synced report have listed their objects. Before that a replica would act on a partial view;
// an informer started on a first read would escape the check.
func readyOnceCached(mgr ctrl.Manager, synced ...func() bool) error {
	for _, obj := range cachedKinds() {
		if _, err := mgr.GetCache().GetInformer(context.Background(), obj, cache.BlockUntilSynced(false)); err != nil {
			return fmt.Errorf("caching %T: %w", obj, err)
		}
	}
	return mgr.AddReadyzCheck("caches", cachesReady(mgr.GetCache(), synced...))
}

// cachesReady is a readiness check that passes once c and every cache whose synced function is
// given have listed their objects.
func cachesReady(c cache.Cache, synced ...func() bool) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), time.Second)
		defer cancel()
		if !c.WaitForCacheSync(ctx) {
			return errors.New("the manager's cache has not synced yet")
		}
		for _, s := range synced {
			if !s() {
				return errors.New("the Job cache has not synced yet")
			}
		}
		return nil
	}
}

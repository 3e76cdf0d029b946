// Package workspace is the kind-agnostic engine of the three reconcilers: one pass reads the
// object, its retained Jobs and its state, books finished Jobs, deletes stuck ones, decides the
// next operation with package decide and starts it as one Job, and ends with a single status
// patch. The per-kind packages only say which kind they reconcile.
package workspace

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/metrics"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/runkey"
)

// Requeue intervals that are not decisions.
const (
	// LagRequeue waits for the Job cache to catch up with a Job the API server has.
	LagRequeue = 5 * time.Second
	// LeaseRequeue waits for another run's Lease.
	LeaseRequeue = 30 * time.Second
	// StuckAge is how old an active Job must be before it can count as stuck.
	StuckAge = time.Minute
	// NextPassRequeue runs the next pass almost at once, for a pass that wrote what the next
	// one decides from (a finalizer, bookkeeping marks, a deleted stuck Job). It is a short
	// fixed delay rather than a rate-limited requeue: the write is done, so no failure is
	// being retried, and one object cannot loop faster than this.
	NextPassRequeue = 100 * time.Millisecond
)

// AgainAtOnce reports whether a pass's result asks for the next pass at once (NextPassRequeue),
// as opposed to a wait. Tests that drive passes as the work queue would use it.
func AgainAtOnce(res ctrl.Result) bool { return res.RequeueAfter == NextPassRequeue }

// PausedAnnotation pauses an object, as in Cluster API.
const PausedAnnotation = clusterv1.PausedAnnotation

// Reconciler reconciles one kind. Client must read the kind from the cache and Secrets,
// Leases and Pods from the API server (the manager disables the cache for those); APIReader
// always reads from the API server.
type Reconciler struct {
	Client    client.Client
	APIReader client.Reader
	// Jobs, when set, is where the objects' Jobs are read from and watched; nil: Client reads
	// them and the controller watches them through the manager's cache.
	Jobs JobCache
	// Metadata reads the metadata of the objects of MetadataKinds that MetadataSelector selects
	// from a cache (the manager's). With it a pass that changes nothing
	// reads no Secret: it takes the state from a memo while the state Secret's resourceVersion is
	// unchanged, and the durable inputs' annotations from the cache; a pass that starts a Job
	// skips the reads of an unlocked state lock and of an existing runner identity. Nil: all of
	// them are read live.
	Metadata client.Reader
	Recorder events.EventRecorder
	Clock    clock.PassiveClock
	Metrics  *metrics.Metrics
	// RunnerImage is the image of the runner init container.
	RunnerImage string
	// Approvals tells whether approval annotations can only have come through plans/approval;
	// an apply that acts on one waits while they could have come from anyone. Nil: approvals
	// are acted on as the annotations hold them, with an event that says so.
	Approvals ApprovalGuard
	// AllowedImages are the module images the install runs (jobs.ImageAllowed); nil allows
	// every image. An identity's spec.allowedImages narrows it for the runs it lends to.
	AllowedImages []string
	// RunKey signs the Jobs the controller creates and the durable inputs it writes, and is
	// what tells them from forgeries: only Jobs whose signature verifies count as runs. The
	// manager always sets it; nil trusts what the owner references say, for a reader that acts
	// on nothing (kubectl captf why).
	RunKey *runkey.Key
	// ControllerNamespace is the namespace the controller runs in, the only one whose Secrets a
	// TerraformClusterIdentity lends; "" lends none.
	ControllerNamespace string

	// Kind is the kind reconciled; KindInfo its row of infrav1.Kinds. New sets both.
	Kind     jobs.Kind
	KindInfo infrav1.KindInfo

	// states remembers the state reads; SetupWithManager creates it.
	states *stateMemo
}

// JobCache holds the managed Jobs apart from the manager's cache (the controller's Job cache).
type JobCache interface {
	// OwnerJobs returns the Jobs labelled as runs of the named object.
	OwnerJobs(namespace string, kind jobs.Kind, name string) ([]batchv1.Job, error)
	// Source watches the Jobs, mapping each change to requests with h.
	Source(h handler.EventHandler) source.Source
}

// New returns the reconciler of one kind, built on base.
func New(base Reconciler, kind infrav1.KindInfo) *Reconciler {
	base.Kind, base.KindInfo = jobs.Kind(kind.Kind), kind
	return &base
}

// Reconcile runs one pass.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := r.KindInfo.New()
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone: nothing of it is remembered any more.
			r.states.forget(types.NamespacedName{Namespace: req.Namespace, Name: state.SecretName(jobs.StateSecretSuffix(req.Namespace, r.Kind, req.Name))})
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !obj.GetDeletionTimestamp().IsZero() && controllerutil.ContainsFinalizer(obj, metav1.FinalizerDeleteDependents) {
		return r.convertForegroundDeletion(ctx, obj)
	}
	if externallyManaged(obj) {
		// Someone else manages the infrastructure: nothing is provisioned or written.
		return r.releaseExternallyManaged(ctx, obj)
	}
	finalizer := r.KindInfo.Finalizer()
	if obj.GetDeletionTimestamp().IsZero() && !controllerutil.ContainsFinalizer(obj, finalizer) {
		return r.setFinalizer(ctx, obj, true)
	}

	p := r.newPass(obj)
	before := obj.DeepCopyObject().(client.Object)
	result, runErr := p.run(ctx)
	if runErr != nil {
		// A pass that failed part-way booked nothing for good: marks written now would say a
		// Job's result is recorded when it is not, and it would never be read again.
		p.booked = nil
	}

	if errors.Is(runErr, errStaleObject) {
		return staleObject(ctx)
	}
	setReady(p.status(), p.stamp(), r.Kind, !obj.GetDeletionTimestamp().IsZero())
	if res, done, err := r.patchStatus(ctx, obj, before); done || err != nil {
		return res, err
	}
	if err := p.afterStatusPatch(ctx); err != nil {
		return ctrl.Result{}, err
	}
	if p.dropFinalizer {
		if err := p.cleanup(ctx); err != nil {
			return ctrl.Result{}, err
		}
		return r.setFinalizer(ctx, obj, false)
	}
	return result, runErr
}

// patchStatus writes the pass's status: one patch, and only when something changed, so a
// converged object costs no write. done ends the pass (the object is gone, or was newer than
// the pass read).
func (r *Reconciler) patchStatus(ctx context.Context, obj, before client.Object) (res ctrl.Result, done bool, err error) {
	data, err := client.MergeFrom(before).Data(obj)
	if err != nil || string(data) == "{}" {
		return ctrl.Result{}, false, err
	}
	// The patch holds the whole conditions list: it applies only to the version the pass read
	// (or wrote itself), never over a newer one a lagging cache did not show.
	before.SetResourceVersion(obj.GetResourceVersion())
	err = r.Client.Status().Patch(ctx, obj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	switch {
	case err == nil:
		return ctrl.Result{}, false, nil
	case apierrors.IsNotFound(err):
		return ctrl.Result{}, true, nil
	case apierrors.IsConflict(err):
		res, err = staleObject(ctx)
		return res, true, err
	}
	// The bookkept marks wait for a successful patch, so the Jobs are read again.
	return ctrl.Result{}, true, fmt.Errorf("patching status: %w", err)
}

// setFinalizer adds or removes the kind's finalizer, on the version of the object the pass read.
func (r *Reconciler) setFinalizer(ctx context.Context, obj client.Object, add bool) (ctrl.Result, error) {
	patch := lockedPatch(obj)
	if add {
		controllerutil.AddFinalizer(obj, r.KindInfo.Finalizer())
	} else {
		controllerutil.RemoveFinalizer(obj, r.KindInfo.Finalizer())
	}
	err := r.Client.Patch(ctx, obj, patch)
	switch {
	case apierrors.IsConflict(err):
		return staleObject(ctx)
	case add && err != nil:
		return ctrl.Result{}, fmt.Errorf("adding the finalizer: %w", err)
	case add:
		return ctrl.Result{RequeueAfter: NextPassRequeue}, nil
	}
	return ctrl.Result{}, client.IgnoreNotFound(err)
}

// convertForegroundDeletion turns a foreground deletion into a background one: the garbage
// collector would otherwise delete what the object owns (its state, durable inputs and Jobs)
// before the object, so before the destroy that needs them ran.
func (r *Reconciler) convertForegroundDeletion(ctx context.Context, obj infrav1.Workspace) (ctrl.Result, error) {
	patch := lockedPatch(obj)
	controllerutil.RemoveFinalizer(obj, metav1.FinalizerDeleteDependents)
	if err := r.Client.Patch(ctx, obj, patch); err != nil {
		if apierrors.IsConflict(err) {
			return staleObject(ctx)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	logf.FromContext(ctx).Info("removed the foregroundDeletion finalizer: the destroy runs before the garbage collector takes what the object owns")
	r.newPass(obj).event(nil, corev1.EventTypeNormal, EventForegroundDeletionConverted, "Deleted in the foreground: the %s finalizer was removed so the destroy runs before the garbage collector takes the state and Jobs", metav1.FinalizerDeleteDependents)
	return ctrl.Result{RequeueAfter: NextPassRequeue}, nil
}

// lockedPatch is a merge patch from obj as it is now that applies only to its resourceVersion:
// lists in it (finalizers, conditions) replace the server's whole, so they must not replace a
// newer version than the one they were computed from.
func lockedPatch(obj client.Object) client.Patch {
	return client.MergeFromWithOptions(obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
}

// staleObject ends a pass whose object was older than the server's (the cache lagged behind a
// write): nothing of it was written, and the next pass starts from the newer version.
func staleObject(ctx context.Context) (ctrl.Result, error) {
	logf.FromContext(ctx).V(1).Info("the object changed since it was read; reading it again")
	return ctrl.Result{RequeueAfter: NextPassRequeue}, nil
}

// pass is the state of one reconcile pass.
type pass struct {
	r   *Reconciler
	obj infrav1.Workspace
	now time.Time
	// jobs are the object's retained Jobs, with this pass's bookkeeping marks applied.
	jobs []batchv1.Job
	// booked are the Jobs this pass booked; their marks are written after the status patch.
	booked []booked
	// dropFinalizer is set when the object is deleted and nothing is left to destroy.
	dropFinalizer bool
	// consumed are object annotations to remove after the status patch.
	consumed []string
	// durableRead is set when this pass read the durable inputs Secret live; durable is what it
	// found, nil for none.
	durableRead bool
	durable     *corev1.Secret
	// credentials are what the object's identity lends its runs.
	credentials Credentials
	// stateInClear is set when the state the pass read exists and is not encrypted; stateKeys
	// are the passphrases readyToRun checked.
	stateInClear bool
	stateKeys    stateKeys
	// exportsGuard and exportsHash are how a pool renders its cluster's exports in this pass.
	exportsGuard ExportsGuard
	exportsHash  string
}

func (r *Reconciler) newPass(obj infrav1.Workspace) *pass {
	return &pass{r: r, obj: obj, now: r.Clock.Now()}
}

func (p *pass) status() *infrav1.WorkspaceStatus { return p.obj.WorkspaceStatus() }

// stamp is the generation and time this pass writes conditions with.
func (p *pass) stamp() stamp { return stamp{generation: p.obj.GetGeneration(), now: p.now} }

// planSlot is the object's status.plan, nil for kinds without plans.
func (p *pass) planSlot() **infrav1.PlanPreview {
	if planned, ok := p.obj.(infrav1.Planned); ok {
		return planned.PlanPreview()
	}
	return nil
}

// stateSuffix is the object's state Secret suffix.
func (p *pass) stateSuffix() string {
	return jobs.StateSecretSuffix(p.obj.GetNamespace(), p.r.Kind, p.obj.GetName())
}

// ownerRef is a reference to the object, as controller when asked.
func (p *pass) ownerRef(controller bool) metav1.OwnerReference {
	gvk := schema.GroupVersionKind{Group: infrav1.GroupVersion.Group, Version: infrav1.GroupVersion.Version, Kind: string(p.r.Kind)}
	ref := *metav1.NewControllerRef(p.obj, gvk)
	if !controller {
		ref.Controller = nil
		ref.BlockOwnerDeletion = nil
	}
	return ref
}

// ownerLabels are the labels that tie Secrets and Leases to the object.
func (p *pass) ownerLabels() map[string]string {
	labels := jobs.OwnerLabels(p.r.Kind, p.obj.GetName())
	if cluster := p.obj.GetLabels()[jobs.LabelClusterName]; cluster != "" {
		labels[jobs.LabelClusterName] = jobs.LabelValue(cluster)
	}
	return labels
}

// event records an event on the object, related to a Job when one is given.
func (p *pass) event(related *batchv1.Job, eventType, reason, note string, args ...any) {
	if p.r.Recorder == nil {
		return
	}
	var rel client.Object
	if related != nil {
		rel = related
	}
	p.r.Recorder.Eventf(p.obj, rel, eventType, reason, reason, note, args...)
}

func (p *pass) listJobs(ctx context.Context) error {
	own, err := p.r.ownJobs(ctx, p.obj)
	p.jobs = own
	return err
}

// podsOf lists the pods of a Job from the API server: only those the Job controller created for
// this very Job (controller reference to its UID), since anyone who may create pods can label
// one with the Job's name and write the result it likes into its status.
func (p *pass) podsOf(ctx context.Context, job *batchv1.Job) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := p.r.APIReader.List(ctx, &pods, client.InNamespace(p.obj.GetNamespace()), client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil {
		return nil, fmt.Errorf("listing the pods of Job %s: %w", job.Name, err)
	}
	own := pods.Items[:0]
	for _, pod := range pods.Items {
		if ref := metav1.GetControllerOf(&pod); ref != nil && ref.UID == job.UID && ref.Kind == "Job" {
			own = append(own, pod)
		}
	}
	return own, nil
}

// SetupWithManager registers the reconciler for its kind, woken by changes of the kind and of
// the Jobs it controls.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, concurrency int) error {
	r.states = newStateMemo()
	b := ctrl.NewControllerManagedBy(mgr).
		Named(strings.ToLower(string(r.Kind))).
		For(r.KindInfo.New()).
		WithOptions(controller.Options{MaxConcurrentReconciles: concurrency})
	if r.Jobs != nil {
		b = b.WatchesRawSource(r.Jobs.Source(handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), r.KindInfo.New(), handler.OnlyControllerOwner())))
	} else {
		b = b.Owns(&batchv1.Job{})
	}
	// Cluster API's objects wake the objects they own: a Cluster those of its cluster, a Machine
	// or MachinePool the object its infrastructure reference names.
	b = b.Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(r.clusterMembers))
	// An identity wakes the objects that name it: a revocation must stop their runs.
	b = b.Watches(&infrav1.TerraformClusterIdentity{}, handler.EnqueueRequestsFromMapFunc(r.identityUsers))
	switch r.KindInfo.Kind {
	case infrav1.MachineKind.Kind:
		b = b.Watches(&clusterv1.Machine{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return r.infrastructureOf(o, o.(*clusterv1.Machine).Spec.InfrastructureRef)
		}))
	case infrav1.MachinePoolKind.Kind:
		b = b.Watches(&clusterv1.MachinePool{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return r.infrastructureOf(o, o.(*clusterv1.MachinePool).Spec.Template.Spec.InfrastructureRef)
		}))
	}
	if r.Metadata != nil {
		// A changed state Secret or durable inputs Secret brings a pass, so a pass that trusted
		// the cache sees the change once the cache has it.
		if err := mgr.GetFieldIndexer().IndexField(context.Background(), r.KindInfo.New(), ownerNameIndex, hashedOwnerName); err != nil {
			return fmt.Errorf("indexing %s by owner label: %w", r.Kind, err)
		}
		b = b.WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.secretOwners))
		// A run that asks for state parts on its lock Lease waits for this pass to create them.
		b = b.WatchesMetadata(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(r.secretOwners), builder.WithPredicates(statePartsAsked))
	}
	return b.Complete(r)
}

// ownerNameIndex indexes the objects whose owner-name label (jobs.LabelValue) is a hash of their
// name by that hash. An object whose label is its name is not indexed: the name finds it, and an
// index entry costs two small sets per object.
const ownerNameIndex = "captf.ownerNameLabel"

// hashedOwnerName is the ownerNameIndex's function.
func hashedOwnerName(o client.Object) []string {
	if value := jobs.LabelValue(o.GetName()); value != o.GetName() {
		return []string{value}
	}
	return nil
}

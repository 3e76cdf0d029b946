package workspace

import (
	"context"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/decide"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/jobs"
)

// run is the body of a pass, before the status patch.
func (p *pass) run(ctx context.Context) (ctrl.Result, error) {
	// Whatever the pass decides, it is the pass a reconcile request asked for.
	setReconcileHandled(p.status(), p.obj.GetAnnotations()[jobs.AnnotationReconcileRequestedAt])
	if err := p.listJobs(ctx); err != nil {
		return ctrl.Result{}, err
	}
	if err := p.bookkeep(ctx); err != nil {
		return ctrl.Result{}, err
	}
	// A pass that booked Jobs ends here: the marks are written after the status patch and the
	// next pass decides from them.
	if len(p.booked) > 0 {
		return ctrl.Result{RequeueAfter: NextPassRequeue}, nil
	}
	// The cached Cluster tells whether to pause; start confirms a resumed object live before
	// the first write of a run, so a pass that starts nothing reads nothing uncached.
	pause, err := PauseOf(ctx, p.r.Client, p.obj)
	if err != nil {
		return ctrl.Result{}, err
	}
	p.reportPause(pause)
	// A running Job may be waiting for state parts, paused or not. Parts that cannot be made
	// fail that run, which reports it; the pass goes on, so nothing else of the object waits.
	if err := p.provideStateParts(ctx); err != nil {
		logf.FromContext(ctx).Error(err, "providing the state parts a run asked for")
		p.event(nil, corev1.EventTypeWarning, EventStatePartsNotProvided, "%s", err.Error())
	}
	if res, running, err := p.followActiveJob(ctx); running || err != nil {
		return res, err
	}
	// No Job runs: clusterctl move may go ahead.
	if err := p.setBlockMove(ctx, false); err != nil {
		return ctrl.Result{}, err
	}
	if pause.Paused {
		return ctrl.Result{}, nil
	}

	f, d, err := p.decide(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	p.durableRead, p.durable, p.credentials = f.durableRead, f.durable, f.Credentials
	p.stateInClear = f.Input.StateErr == nil && f.Input.State.Exists && f.Input.State.KeyID == ""
	p.exportsGuard, p.exportsHash = f.ExportsGuard, f.ExportsHash
	if err := p.actOnFacts(ctx, f); err != nil {
		return ctrl.Result{}, err
	}
	p.r.Metrics.Decided(p.r.Kind, d.Op, d.Reason)
	switch {
	case d.DropFinalizer:
		if d.Reason == decide.Abandoned {
			logf.FromContext(ctx).Info("deletion lets the infrastructure go without a destroy", "annotation", AbandonAnnotation)
			p.event(nil, corev1.EventTypeWarning, EventInfrastructureAbandoned, "Deleted without a destroy: %s names this object, so its infrastructure is left as it is and its state is removed", AbandonAnnotation)
		}
		p.dropFinalizer = true
		return ctrl.Result{}, nil
	case d.Op == "":
		// A backoff wait keeps the failure's condition as it is; the runs API shows the window.
		var plan *infrav1.PlanPreview
		if slot := p.planSlot(); slot != nil {
			plan = *slot
		}
		setWaiting(p.status(), p.stamp(), d.Reason, plan, p.obj.GetNamespace())
		return ctrl.Result{RequeueAfter: p.nextLook(d.RequeueAfter)}, nil
	}
	return p.start(ctx, d, f.Rendered, f.RenderErr == nil, f.Input.InterruptedApply)
}

// SourcesRequeue is how long an object with spec.variablesFrom waits at most before its
// sources are read again: they are not watched, and a changed value is a new input.
const SourcesRequeue = time.Minute

// nextLook is when to look again after a decision that starts nothing.
func (p *pass) nextLook(after time.Duration) time.Duration {
	if len(p.obj.WorkspaceSpec().VariablesFrom) > 0 && p.r.KindInfo.InputsMutable(p.obj) && (after == 0 || after > SourcesRequeue) {
		return SourcesRequeue
	}
	return after
}

// followActiveJob keeps status.activeJob true to the Jobs. running is set when a Job runs (or
// the cache lags behind one): the pass then decides nothing. A Job the status names that is
// finished is cleared; one the API server no longer has, or whose signature no longer verifies,
// is recorded as vanished.
func (p *pass) followActiveJob(ctx context.Context) (res ctrl.Result, running bool, err error) {
	status := p.status()
	if active := jobs.ActiveJob(p.jobs); active != nil {
		res, err := p.watchActive(ctx, active)
		return res, true, err
	}
	if status.ActiveJob == nil {
		return ctrl.Result{}, false, nil
	}
	if p.hasJob(status.ActiveJob.Name) {
		// The Job status names is finished and booked; only the status was not yet cleared.
		status.ActiveJob = nil
		return ctrl.Result{}, false, nil
	}
	// The status names a Job the cache does not have: lag, or a Job gone while it ran.
	var job batchv1.Job
	err = p.r.APIReader.Get(ctx, client.ObjectKey{Namespace: p.obj.GetNamespace(), Name: status.ActiveJob.Name}, &job)
	switch {
	case err == nil && (p.r.RunKey == nil || p.r.RunKey.JobSigned(&job)):
		return ctrl.Result{RequeueAfter: LagRequeue}, true, nil
	case err == nil:
		// Its signature no longer verifies: someone else changed it, and it is no run of the
		// object any more. It counts as gone.
		logf.FromContext(ctx).Info("the active Job's signature no longer verifies; it counts as gone", "job", job.Name)
	case !apierrors.IsNotFound(err):
		return ctrl.Result{}, false, fmt.Errorf("reading Job %s: %w", status.ActiveJob.Name, err)
	}
	if err := p.vanished(ctx, status.ActiveJob); err != nil {
		return ctrl.Result{}, false, err
	}
	status.ActiveJob = nil
	return ctrl.Result{}, false, nil
}

// reportPause writes the Paused condition, with an event when it changes.
func (p *pass) reportPause(pause Pause) {
	wasPaused := conditions.IsTrue(p.status().Conditions, conditions.Paused)
	setPaused(p.status(), p.stamp(), pause)
	switch {
	case pause.Paused && !wasPaused:
		p.event(nil, corev1.EventTypeNormal, EventPaused, "Paused: %s; Jobs are booked, none starts", pause.Why)
	case !pause.Paused && wasPaused:
		p.event(nil, corev1.EventTypeNormal, EventResumed, "Resumed")
	}
}

// setBlockMove adds or removes clusterctl's block-move annotation on the object, in its own
// write: it is set before a Job is created and removed once none runs, so `clusterctl move`
// (which pauses first, then waits for the annotation to go) never moves an object mid-run.
func (p *pass) setBlockMove(ctx context.Context, block bool) error {
	_, has := p.obj.GetAnnotations()[BlockMoveAnnotation]
	if has == block {
		return nil
	}
	before := p.obj.DeepCopyObject().(client.Object)
	annotations := p.obj.GetAnnotations()
	if block {
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[BlockMoveAnnotation] = "true"
	} else {
		delete(annotations, BlockMoveAnnotation)
	}
	p.obj.SetAnnotations(annotations)
	if err := p.patchObject(ctx, before); err != nil {
		return fmt.Errorf("writing the annotation %s: %w", BlockMoveAnnotation, err)
	}
	return nil
}

// errStaleObject marks a write of the object refused because the server holds a newer version
// than the pass read: the pass ends, and the next one reads the newer version.
var errStaleObject = errors.New("the object changed since the pass read it")

// staleOr marks a conflict on a write of the object as errStaleObject.
func staleOr(err error) error {
	if apierrors.IsConflict(err) {
		return fmt.Errorf("%w: %w", errStaleObject, err)
	}
	return err
}

// patchObject writes what changed on the object since before (metadata or spec, never status)
// without losing the pass's status: the patch is sent from a copy, since the server's answer
// carries the stored status, and only the new resourceVersion and generation come back. The
// pass's own status changes go in its status patch. It applies only to the version the pass
// holds, so a pass started from a lagging cache stops at its first write.
func (p *pass) patchObject(ctx context.Context, before client.Object) error {
	sent := p.obj.DeepCopyObject().(client.Object)
	if err := p.r.Client.Patch(ctx, sent, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return staleOr(err)
	}
	p.obj.SetResourceVersion(sent.GetResourceVersion())
	p.obj.SetGeneration(sent.GetGeneration())
	return nil
}

// actOnFacts reports what the facts say about the state, a requested restore, drift and the
// inputs, and keeps the state safe: it marks an applied state, backs the state up and remembers
// it for the next pass.
func (p *pass) actOnFacts(ctx context.Context, f Facts) error {
	status, in := p.status(), f.Input
	if errors.Is(in.StateErr, state.ErrLost) {
		if c := conditions.Get(status.Conditions, conditions.StateReadable); c == nil || c.Reason != conditions.ReasonStateLost {
			p.event(nil, corev1.EventTypeWarning, EventStateLost, "State Secret %s is missing although an apply succeeded before (%s on %s): nothing is applied and deletion is held; restore a backup (%s) or delete %s to start over",
				state.SecretName(p.stateSuffix()), jobs.AnnotationApplied, jobs.InputsSecretName(p.r.Kind, p.obj.GetName()), jobs.AnnotationRestoreState, jobs.InputsSecretName(p.r.Kind, p.obj.GetName()))
		}
	}
	setStateReadable(status, p.stamp(), in.State, in.StateErr)
	if err := p.reportClusterAPI(ctx, f); err != nil {
		return err
	}
	if in.StateErr == nil {
		if err := p.actOnOutputs(ctx, f); err != nil {
			return err
		}
	}
	if in.StateErr == nil && in.State.InputsHash != "" && f.DurableExists && f.Durable.Annotations[jobs.AnnotationApplied] != "true" {
		// A state that records an inputs hash was applied: mark it, so its loss is noticed.
		if err := p.markApplied(ctx); err != nil {
			return err
		}
	}
	if in.StateErr == nil {
		if err := p.backupState(ctx, in.State, f.StateSecret, f.StateRemembered); err != nil {
			return err
		}
	}
	if f.stateVersion != "" {
		// Read live and, if it needed one, backed up: the next pass may take it from the memo.
		p.r.states.remember(f.stateKey, f.stateVersion, in.State, in.StateErr)
	}
	if f.RestoreProblem != "" {
		setRestoreProblem(status, p.stamp(), f.RestoreProblem)
	}
	setDriftPending(status, p.stamp(), in)
	if f.RenderErr != nil && !in.Deleting {
		setInputsProblem(status, p.stamp(), f.RenderErr)
	}
	return nil
}

// actOnOutputs writes the outputs of a state read live (a remembered state's are already
// written) and lets a machine ask for its replacement from the health its state reports.
func (p *pass) actOnOutputs(ctx context.Context, f Facts) error {
	prevHealth := conditions.Get(p.status().Conditions, conditions.InfrastructureHealthy).DeepCopy()
	if f.StateSecret != nil {
		if err := p.applyOutputs(ctx, f.Input.State, f.Dependencies); err != nil {
			return err
		}
	}
	return p.reconcileRemediation(ctx, f.Input.State, f.Dependencies.Machine, prevHealth)
}

// reportClusterAPI writes what Cluster API and the identity provide for a run, and what a
// deleted cluster waits for; a revoked identity's copy of the credentials goes.
func (p *pass) reportClusterAPI(ctx context.Context, f Facts) error {
	status := p.status()
	p.warnBootstrapRefused(f.Dependencies)
	setDependencies(status, p.stamp(), f.Dependencies)
	setIdentity(status, p.stamp(), f.Credentials)
	if f.Input.Deleting && p.r.Kind == jobs.KindCluster {
		setDeletionBlocked(status, p.stamp(), f.Dependents)
	}
	if p.r.Kind == jobs.KindMachinePool && f.Dependencies.Ready() {
		setAutoscaling(status, p.stamp(), f.Dependencies.Inputs.Pool.Autoscaling, f.Dependencies.AutoscalingProblem)
	}
	if tc, ok := p.obj.(*infrav1.TerraformCluster); ok {
		ep := tc.Spec.ControlPlaneEndpoint
		setEndpointAvailable(status, p.stamp(), (ep.Host != "" && ep.Port != 0) || f.Dependencies.Inputs.Cluster.ControlPlaneEndpoint != nil)
	}
	if f.Credentials.Identity != "" && !f.Credentials.Allowed() {
		return p.releaseMirror(ctx, f.Credentials.Identity)
	}
	return nil
}

// decide gathers the facts and decides. Facts partly taken from caches may only confirm that
// there is nothing to do: a decision to start a Job is made again from live reads, so a lagging
// cache can delay a run (until the Secret's event brings a pass) but never start a wrong one.
func (p *pass) decide(ctx context.Context) (Facts, decide.Decision, error) {
	useCache := p.r.Metadata != nil && p.r.states != nil
	for {
		f, err := p.r.gatherFacts(ctx, p.r.APIReader, p.obj, p.jobs, p.now, useCache)
		if err != nil {
			return f, decide.Decision{}, err
		}
		d := decide.Decide(f.Input)
		if d.Op == "" || !f.FromCache {
			return f, d, nil
		}
		useCache = false
	}
}

// hasJob reports whether the object's listed Jobs include name.
func (p *pass) hasJob(name string) bool {
	for i := range p.jobs {
		if p.jobs[i].Name == name {
			return true
		}
	}
	return false
}

// watchActive records the running Job in status (which also adopts a Job a crashed pass created)
// and deletes it when it can never start: older than StuckAge, without its per-run Secret, and
// with no pod past Pending. This also runs on paused objects, so such a Job cannot hold a move.
func (p *pass) watchActive(ctx context.Context, job *batchv1.Job) (ctrl.Result, error) {
	status := p.status()
	status.ActiveJob = &infrav1.ActiveJob{
		// A Job with an attempt label out of range (hand-made) still shows; 0 would fail the
		// status patch and wedge the object.
		Name: job.Name, Operation: infrav1.Operation(jobs.OpOf(job)), Attempt: max(jobs.AttemptOf(job), 1),
		StartTime: ptrTime(job.CreationTimestamp),
	}
	if p.now.Sub(job.CreationTimestamp.Time) < StuckAge {
		return ctrl.Result{RequeueAfter: StuckAge}, nil
	}
	stuck, err := p.isStuck(ctx, job)
	if err != nil || !stuck {
		return ctrl.Result{RequeueAfter: decide.JobActiveRequeue}, err
	}
	// The server forgets the Job before it goes: a crash between the two must not leave
	// status.activeJob naming a Job that is gone, which reads as an apply that vanished while it
	// ran, when this one never started.
	status.ActiveJob = nil
	if err := p.clearActiveJob(ctx); err != nil {
		return ctrl.Result{}, err
	}
	background := metav1.DeletePropagationBackground
	if err := p.r.Client.Delete(ctx, job, &client.DeleteOptions{PropagationPolicy: &background, Preconditions: &metav1.Preconditions{UID: &job.UID}}); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("deleting stuck Job %s: %w", job.Name, err)
	}
	logf.FromContext(ctx).Info("deleted stuck Job: no per-run Secret and no pod started", "job", job.Name, "age", p.now.Sub(job.CreationTimestamp.Time).Round(time.Second))
	p.event(job, corev1.EventTypeWarning, EventStuckJobDeleted, "Deleted Job %s: its per-run Secret is missing and no pod started within %s", job.Name, StuckAge)
	return ctrl.Result{RequeueAfter: NextPassRequeue}, nil
}

// clearActiveJob removes status.activeJob on the server at once, ahead of the pass's own patch.
func (p *pass) clearActiveJob(ctx context.Context) error {
	obj := p.obj.DeepCopyObject().(client.Object)
	body := fmt.Sprintf(`{"metadata":{"resourceVersion":%q},"status":{"activeJob":null}}`, p.obj.GetResourceVersion())
	if err := p.r.Client.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(body))); err != nil {
		return fmt.Errorf("clearing status.activeJob: %w", staleOr(err))
	}
	// The pass's own write: its status patch follows from this version.
	p.obj.SetResourceVersion(obj.GetResourceVersion())
	return nil
}

func (p *pass) isStuck(ctx context.Context, job *batchv1.Job) (bool, error) {
	var secret corev1.Secret
	err := p.r.APIReader.Get(ctx, client.ObjectKey{Namespace: job.Namespace, Name: jobs.RunSecretName(job.Name)}, &secret)
	switch {
	case err == nil:
		return false, nil
	case !apierrors.IsNotFound(err):
		return false, fmt.Errorf("reading the per-run Secret of %s: %w", job.Name, err)
	}
	pods, err := p.podsOf(ctx, job)
	if err != nil {
		return false, err
	}
	for _, pod := range pods {
		if pod.Status.Phase != corev1.PodPending {
			return false, nil
		}
	}
	return true, nil
}

// lastSuccess is when op last succeeded: the newer of the status field and the newest retained
// success, since status may have been lost in a move but the Jobs were not.
func lastSuccess(all []batchv1.Job, op jobs.Op, recorded *metav1.Time) time.Time {
	var t time.Time
	if recorded != nil {
		t = recorded.Time
	}
	if _, finished, ok := jobs.NewestSuccess(all, op); ok && finished.After(t) {
		t = finished
	}
	return t
}

func ptrTime(t metav1.Time) *metav1.Time { return &t }

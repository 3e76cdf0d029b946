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
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/decide"
	"github.com/captf/captf/controller/inputs"
	"github.com/captf/captf/controller/jobspec"
	"github.com/captf/captf/controller/lease"
	"github.com/captf/captf/jobs"
)

// start starts the decided operation as one Job, in the order that survives a crash between any
// two steps: the run Lease (its holder is the Job about to be created), the durable inputs
// (apply), the Job, its per-run Secret, then status.activeJob. A repeated pass computes the same
// name and adopts whatever the crashed pass left.
func (p *pass) start(ctx context.Context, d decide.Decision, rendered inputs.Rendered, renderable bool, interruptedApply string) (ctrl.Result, error) {
	status := p.status()
	spec := p.obj.WorkspaceSpec()
	src, err := p.chooseSource(ctx, d, rendered, renderable)
	if err != nil {
		return ctrl.Result{}, err
	}
	if src.missing != "" {
		p.setCondition(d.Op, metav1.ConditionFalse, conditions.ReasonDurableInputsMissing, src.missing)
		return ctrl.Result{RequeueAfter: decide.InputsRequeue}, nil
	}
	attempt := jobs.NextAttempt(p.jobs, d.Op)
	hash, tick := jobs.HashAndTick(d.Op, d.Names)
	name, err := jobs.JobName(jobs.NameInputs{Kind: p.r.Kind, Name: p.obj.GetName(), Op: d.Op, Attempt: attempt, InputsHash: hash, Tick: tick})
	if err != nil {
		return ctrl.Result{}, err
	}
	if ready, err := p.runnerServiceAccountReady(ctx); err != nil || !ready {
		return ctrl.Result{RequeueAfter: GateRequeue}, err
	}
	deadline := ptr.Deref(spec.Jobs.ActiveDeadlineSeconds, jobspec.DefaultActiveDeadlineSeconds)
	leaseReq := lease.Request{
		Namespace: p.obj.GetNamespace(), Name: jobs.RunLeaseName(p.stateSuffix()),
		Job: name, Op: d.Op, Labels: p.ownerLabels(), DeadlineSeconds: deadline,
	}
	acquired, err := lease.Acquire(ctx, p.r.Client, leaseReq, p.holder, p.now)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !acquired {
		p.r.Metrics.LeaseWaits.WithLabelValues(string(p.r.Kind), "run_lease").Inc()
		p.setCondition(d.Op, metav1.ConditionUnknown, conditions.ReasonWaitingForRunLease, "waiting for the run Lease "+leaseReq.Name+" held by another run")
		return ctrl.Result{RequeueAfter: LeaseRequeue}, nil
	}

	if err := p.ensureRunnerIdentity(ctx); err != nil {
		return ctrl.Result{}, err
	}
	lock, err := p.checkStateLock(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	if d.Op == jobs.OpApply {
		if err := p.writeDurableInputs(ctx, rendered); err != nil {
			return ctrl.Result{}, err
		}
	}
	annotations := map[string]string{}
	var args []string
	if d.AfterFailedApply {
		annotations[jobs.AnnotationAfterFailedApply] = "true"
	}
	if d.Op == jobs.OpApply && interruptedApply != "" {
		annotations[jobs.AnnotationAfterInterruptedApply] = interruptedApply
	}
	if d.Names.DriftRemediation {
		annotations[jobs.AnnotationDriftRemediation] = "true"
	}
	if lock.staleID != "" {
		args = append(args, "--force-unlock="+lock.staleID)
	}
	if d.Guard {
		args = append(args, "--guard-deletes", "--inputs-hash="+hash)
		if d.AllowDeletesHash != "" {
			args = append(args, "--allow-deletes-hash="+d.AllowDeletesHash)
		}
	}
	var planKey string
	if d.Op == jobs.OpPlan || d.ExpectPlan != "" {
		if planKey, err = p.ensurePlanKey(ctx); err != nil {
			return ctrl.Result{}, err
		}
	}
	if d.ExpectPlan != "" || d.AllowDeletesHash != "" {
		// The approval is consumed by a successful apply; the Job keeps who gave it.
		for _, key := range []string{jobs.AnnotationApprovedBy, jobs.AnnotationApprovedAt} {
			if v := p.obj.GetAnnotations()[key]; v != "" {
				annotations[key] = v
			}
		}
	}
	if d.ExpectPlan != "" {
		annotations[jobs.AnnotationApprovedPlan] = d.ExpectPlan
		args = append(args, "--expect-plan="+d.ExpectPlan)
	}
	data := src.data
	var restoreBackup string
	if d.Op == jobs.OpRestore {
		annotations[jobs.AnnotationRestoreSerial] = d.RestoreSerial
		restoreBackup = d.Names.BackupName
		args = append(args, "--restore-chunks=1", fmt.Sprintf("--restore-resources=%d", d.RestoreResources))
	}
	source := spec.Source
	source.Image = src.image
	job := jobspec.Build(jobspec.Params{
		Kind: p.r.Kind, Namespace: p.obj.GetNamespace(), ObjectName: p.obj.GetName(),
		ClusterName: p.obj.GetLabels()[jobs.LabelClusterName], Owner: p.ownerRef(true),
		Name: name, Op: d.Op, Attempt: attempt, InputsHash: hash,
		Policy: spec.Jobs, Source: source, RunnerImage: p.r.RunnerImage,
		StateSuffix: p.stateSuffix(), Annotations: annotations, RunnerArgs: args, PlanKeySecret: planKey,
		RestoreBackup: restoreBackup,
	})
	created, err := p.createJob(ctx, job, leaseReq)
	if errors.Is(err, errJobNameTaken) {
		return ctrl.Result{RequeueAfter: NameTakenRequeue}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := p.ensureRunSecret(ctx, created, data); err != nil {
		return ctrl.Result{}, err
	}
	status.ActiveJob = &infrav1.ActiveJob{Name: created.Name, Operation: infrav1.Operation(d.Op), Attempt: attempt, StartTime: ptrTime(metav1.NewTime(p.now))}
	// A running Job changes no verdict of an earlier one; only a first run says it is running.
	if conditions.Get(status.Conditions, conditionFor(d.Op)) == nil {
		p.setCondition(d.Op, metav1.ConditionUnknown, runningReason(d.Op), fmt.Sprintf("Job %s (%s, attempt %d) is running", created.Name, d.Reason, attempt))
	}
	if dropped := jobspec.DroppedEnv(spec.Jobs); len(dropped) > 0 {
		p.event(created, corev1.EventTypeWarning, EventEnvDropped, "Left out environment variables the runner controls: %v", dropped)
	}
	p.event(created, corev1.EventTypeNormal, EventJobCreated, "Started %s Job %s, attempt %d (%s)", d.Op, created.Name, attempt, d.Reason)
	if src.digestUnknown {
		p.event(created, corev1.EventTypeWarning, EventDigestUnknown, "Job %s runs %s as written: no digest is pinned for it yet", created.Name, src.image)
	}
	switch {
	case lock.staleID != "":
		p.r.Metrics.ForceUnlocks.WithLabelValues(string(p.r.Kind)).Inc()
		p.event(created, corev1.EventTypeWarning, EventForceUnlocked, "Job %s releases the stale state lock %s, left by a pod of this object's Jobs that is gone or finished", created.Name, lock.staleID)
	case lock.heldBy != "":
		p.reportStateLock(lock)
		p.event(created, corev1.EventTypeWarning, EventStateLocked, "The state is locked (%s); Job %s waits up to lockTimeoutSeconds for it", lock.heldBy, created.Name)
	}
	switch {
	case d.ExpectPlan != "":
		p.event(created, corev1.EventTypeNormal, EventPlanApproved, "Applying the approved plan %s", d.ExpectPlan)
	case d.Names.DriftRemediation:
		p.event(created, corev1.EventTypeNormal, EventDriftRemediationStarted, "Applying the current inputs again to remediate drift")
		conditions.Set(&status.Conditions, conditions.DriftDetected, metav1.ConditionTrue, "DriftRemediating", "Job "+created.Name+" remediates the drift", p.obj.GetGeneration(), p.now)
	}
	return ctrl.Result{RequeueAfter: decide.JobActiveRequeue}, nil
}

// errJobNameTaken says that a Job of the decided name exists and is not the object's.
var errJobNameTaken = errors.New("the Job name is taken by a Job this object does not control")

// NameTakenRequeue is how soon a pass looks again at a Job name someone else's Job holds.
const NameTakenRequeue = time.Minute

// createJob creates the Job, or adopts the one a repeated pass finds under the same name. A
// create the API server rejected proves no Job exists, so the Lease is given back; a timeout or
// server error proves nothing, and the Lease is kept for the retry.
func (p *pass) createJob(ctx context.Context, job *batchv1.Job, leaseReq lease.Request) (*batchv1.Job, error) {
	err := p.r.Client.Create(ctx, job)
	switch {
	case err == nil:
		return job, nil
	case apierrors.IsAlreadyExists(err):
		var existing batchv1.Job
		if err := p.r.APIReader.Get(ctx, client.ObjectKeyFromObject(job), &existing); err != nil {
			return nil, fmt.Errorf("reading the existing Job %s: %w", job.Name, err)
		}
		if !OwnedBy(&existing, p.obj) {
			// Someone else's Job holds the name: adopting it would run, book and trust a Job
			// that is not ours. The name is deterministic, so the op waits until it is gone.
			if releaseErr := lease.Release(ctx, p.r.Client, leaseReq.Namespace, leaseReq.Name, leaseReq.Job); releaseErr != nil {
				return nil, fmt.Errorf("giving back the Lease after a name conflict on Job %s: %w", job.Name, releaseErr)
			}
			msg := fmt.Sprintf("Job %s exists and is not controlled by this object; delete it so the %s can start", job.Name, jobs.OpOf(job))
			p.setCondition(jobs.OpOf(job), metav1.ConditionFalse, conditions.ReasonJobNameTaken, msg)
			p.event(nil, corev1.EventTypeWarning, EventJobNameTaken, "%s", msg)
			return nil, errJobNameTaken
		}
		return &existing, nil
	case rejected(err):
		if releaseErr := lease.Release(ctx, p.r.Client, leaseReq.Namespace, leaseReq.Name, leaseReq.Job); releaseErr != nil {
			return nil, fmt.Errorf("creating Job %s was rejected (%v), and giving back the Lease failed: %w", job.Name, err, releaseErr)
		}
		p.setCondition(jobs.OpOf(job), metav1.ConditionFalse, "JobRejected", fmt.Sprintf("creating Job %s was rejected: %v", job.Name, err))
		p.event(nil, corev1.EventTypeWarning, EventJobFailed, "Creating Job %s was rejected: %v", job.Name, err)
		return nil, fmt.Errorf("creating Job %s: %w", job.Name, err)
	}
	return nil, fmt.Errorf("creating Job %s: %w", job.Name, err)
}

// rejected reports whether the API server refused a create outright.
func rejected(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) ||
		apierrors.IsBadRequest(err) || apierrors.IsRequestEntityTooLargeError(err) || apierrors.IsNotFound(err)
}

// ensureRunSecret creates the Job's per-run Secret. One that already belongs to this Job is
// kept: the name embeds the inputs hash, so its content is the same. One owned by another Job of
// the same name, an earlier pruned Job whose collection is pending, is replaced, since adopting
// it would let that collection delete it under the new pod.
func (p *pass) ensureRunSecret(ctx context.Context, job *batchv1.Job, data map[string][]byte) error {
	name := jobs.RunSecretName(job.Name)
	secret := func() *corev1.Secret {
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: job.Namespace,
				Labels:          map[string]string{jobs.LabelManaged: jobs.ManagedValue},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))},
			},
			Data: data,
		}
	}
	// Create first: a new Job has no Secret yet, so the common case costs one request.
	err := p.r.Client.Create(ctx, secret())
	switch {
	case err == nil:
		return nil
	case !apierrors.IsAlreadyExists(err):
		return fmt.Errorf("creating the per-run Secret %s: %w", name, err)
	}
	var existing corev1.Secret
	switch err := p.r.APIReader.Get(ctx, client.ObjectKey{Namespace: job.Namespace, Name: name}, &existing); {
	case apierrors.IsNotFound(err):
		// Deleted since the create failed: the next pass creates it.
		return fmt.Errorf("the per-run Secret %s vanished after a conflicting create", name)
	case err != nil:
		return fmt.Errorf("reading the per-run Secret %s: %w", name, err)
	}
	if ref := metav1.GetControllerOf(&existing); ref != nil && ref.UID == job.UID {
		return nil
	}
	if err := p.r.Client.Delete(ctx, &existing, client.Preconditions{UID: &existing.UID}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the stale per-run Secret %s: %w", name, err)
	}
	if err := p.r.Client.Create(ctx, secret()); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the per-run Secret %s: %w", name, err)
	}
	return nil
}

// writeDurableInputs keeps the last rendered inputs of an apply, for destroy and drift runs of
// inputs that are no longer in the spec, and as the marker that survives a move.
func (p *pass) writeDurableInputs(ctx context.Context, rendered inputs.Rendered) error {
	name := jobs.InputsSecretName(p.r.Kind, p.obj.GetName())
	var secret corev1.Secret
	var err error
	switch {
	case p.durableRead && p.durable == nil:
		// The pass's live read found none.
		err = apierrors.NewNotFound(corev1.Resource("secrets"), name)
	case p.durableRead:
		secret = *p.durable
	default:
		err = p.r.APIReader.Get(ctx, client.ObjectKey{Namespace: p.obj.GetNamespace(), Name: name}, &secret)
	}
	switch {
	case apierrors.IsNotFound(err):
		secret = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: p.obj.GetNamespace(), Labels: p.ownerLabels(),
				Annotations:     map[string]string{},
				OwnerReferences: []metav1.OwnerReference{p.ownerRef(false)},
			},
			Data: rendered.Data(),
		}
		secret.Annotations[jobs.AnnotationImage] = p.obj.WorkspaceSpec().Source.Image
		if err := p.r.Client.Create(ctx, &secret); err != nil {
			return fmt.Errorf("creating the durable inputs Secret: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("reading the durable inputs Secret: %w", err)
	}
	image := p.obj.WorkspaceSpec().Source.Image
	if string(secret.Data[inputs.MainFile]) == string(rendered.Main) && string(secret.Data[inputs.VarsFile]) == string(rendered.Vars) &&
		secret.Annotations[jobs.AnnotationImage] == image {
		return nil
	}
	secret.Data = rendered.Data()
	if secret.Annotations == nil {
		secret.Annotations = map[string]string{}
	}
	if secret.Annotations[jobs.AnnotationImage] != image {
		// A digest pins the image it was pulled for; the next successful apply pins again.
		delete(secret.Annotations, jobs.AnnotationImageDigest)
	}
	secret.Annotations[jobs.AnnotationImage] = image
	if err := p.r.Client.Update(ctx, &secret); err != nil {
		return fmt.Errorf("updating the durable inputs Secret: %w", err)
	}
	return nil
}

// holder reads the Job a run Lease names, from the API server.
func (p *pass) holder(ctx context.Context, name string) (lease.Holder, error) {
	var job batchv1.Job
	err := p.r.APIReader.Get(ctx, client.ObjectKey{Namespace: p.obj.GetNamespace(), Name: name}, &job)
	if apierrors.IsNotFound(err) {
		return lease.Holder{}, nil
	}
	if err != nil {
		return lease.Holder{}, err
	}
	pods, err := p.podsOf(ctx, &job)
	if err != nil {
		return lease.Holder{}, err
	}
	h := lease.Holder{Exists: true, Finished: jobs.OutcomeOf(&job).Finished()}
	for _, pod := range pods {
		if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
			h.PodsRunning = true
		}
	}
	return h, nil
}

// setCondition writes the condition an op reports in.
func (p *pass) setCondition(op jobs.Op, status metav1.ConditionStatus, reason, message string) {
	conds := &p.status().Conditions
	conditions.Set(conds, conditionFor(op), status, reason, message, p.obj.GetGeneration(), p.now)
	conditions.SetReady(conds, p.obj.GetGeneration(), p.now)
}

// conditionFor is the condition an op reports in: refresh and drift in DriftJobSucceeded,
// everything else in ApplyJobSucceeded.
func conditionFor(op jobs.Op) string {
	switch op {
	case jobs.OpRefresh, jobs.OpDrift:
		return conditions.DriftJobSucceeded
	case jobs.OpRestore:
		return conditions.RestoreJobSucceeded
	}
	return conditions.ApplyJobSucceeded
}

func runningReason(op jobs.Op) string {
	switch op {
	case jobs.OpRefresh, jobs.OpDrift:
		return "DriftJobRunning"
	case jobs.OpDestroy:
		return "DestroyRunning"
	}
	return conditions.ReasonApplyRunning
}

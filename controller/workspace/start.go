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
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/decide"
	"github.com/captf/captf/controller/inputs"
	"github.com/captf/captf/controller/jobspec"
	"github.com/captf/captf/controller/lease"
	"github.com/captf/captf/jobs"
)

// start starts the decided operation as one Job, in the order that survives a crash between any
// two steps: the plan key (plan, approved apply), the run Lease (its holder is the Job about to
// be created), the Job and its signature, the durable inputs (apply), its per-run Secret, then
// status.activeJob. A repeated pass computes the same name and adopts whatever the crashed pass
// left.
func (p *pass) start(ctx context.Context, d decide.Decision, rendered inputs.Rendered, renderable bool, interruptedApply string) (ctrl.Result, error) {
	// A pause the cache has not seen yet must still stop the run: clusterctl move pauses the
	// Cluster and then waits only for the Jobs it can see.
	if pause, err := PauseOf(ctx, p.r.APIReader, p.obj); err != nil || pause.Paused {
		if pause.Paused {
			p.reportPause(pause)
		}
		return ctrl.Result{}, err
	}
	src, wait, err := p.sourceToRun(ctx, d, rendered, renderable)
	if err != nil || wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, err
	}
	attempt := jobs.NextAttempt(p.jobs, d.Op)
	hash, tick := jobs.HashAndTick(d.Op, d.Names)
	name, err := jobs.JobName(jobs.NameInputs{Kind: p.r.Kind, Name: p.obj.GetName(), Op: d.Op, Attempt: attempt, InputsHash: hash, Tick: tick})
	if err != nil {
		return ctrl.Result{}, err
	}
	mirror, planKey, wait, err := p.readyToRun(ctx, d)
	if err != nil || wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, err
	}
	leaseReq, acquired, err := p.acquireRunLease(ctx, d.Op, name)
	if err != nil {
		return ctrl.Result{}, err
	} else if !acquired {
		return ctrl.Result{RequeueAfter: LeaseRequeue}, nil
	}
	if err := p.ensureRunnerIdentity(ctx); err != nil {
		return ctrl.Result{}, err
	}
	lock, err := p.checkStateLock(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	annotations := jobAnnotations(d, interruptedApply, p.obj.GetAnnotations(), p.exportsHash, p.exportsGuard == ExportsHeld)
	spec := p.obj.WorkspaceSpec()
	source := spec.Source
	source.Image = src.image
	params := jobspec.Params{
		Kind: p.r.Kind, Namespace: p.obj.GetNamespace(), ObjectName: p.obj.GetName(),
		ClusterName: p.obj.GetLabels()[jobs.LabelClusterName], WatchFilter: p.obj.GetLabels()[clusterv1.WatchLabel],
		Owner: p.ownerRef(true), Name: name, Op: d.Op, Attempt: attempt, InputsHash: hash,
		Policy: spec.Jobs, Source: source, RunnerImage: p.r.RunnerImage,
		StateSuffix: p.stateSuffix(), Annotations: annotations,
		PlanKeySecret: planKey, ForceUnlock: lock.StaleID, GuardDeletes: d.Guard,
		AllowDeletesHash: d.AllowDeletesHash, ExpectPlan: d.ExpectPlan, CredentialsSecret: mirror,
	}
	if k := p.stateKeys; k.secret != "" {
		params.StateKeys = &jobspec.StateKeys{Secret: k.secret, IDs: k.ids(), Current: k.current, AcceptPlaintext: p.stateInClear}
	}
	if d.Op == jobs.OpRestore {
		params.Restore = &jobspec.Restore{Backup: d.Names.BackupName, Resources: d.RestoreResources, Chunks: d.RestoreChunks}
	}
	if err := p.setBlockMove(ctx, true); err != nil {
		return ctrl.Result{}, err
	}
	created, err := p.createJob(ctx, jobspec.Build(params), leaseReq)
	if errors.Is(err, errJobNameTaken) {
		return ctrl.Result{RequeueAfter: NameTakenRequeue}, nil
	}
	if errors.Is(err, errJobUnsigned) {
		return ctrl.Result{RequeueAfter: NextPassRequeue}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := p.handInputs(ctx, created, d.Op, rendered, src.data); err != nil {
		return ctrl.Result{}, err
	}
	p.reportStarted(ctx, created, d, attempt, src, lock)
	return ctrl.Result{RequeueAfter: decide.JobActiveRequeue}, nil
}

// handInputs gives a created Job its inputs. The durable inputs of an apply follow the Job and
// precede its per-run Secret: the pod cannot start before that Secret exists, so no apply runs
// without them, and a create the API server refused leaves them (and the pinned digest) as the
// last apply left them.
func (p *pass) handInputs(ctx context.Context, job *batchv1.Job, op jobs.Op, rendered inputs.Rendered, data map[string][]byte) error {
	if op == jobs.OpApply {
		if err := p.writeDurableInputs(ctx, rendered); err != nil {
			return err
		}
	}
	return p.ensureRunSecret(ctx, job, data)
}

// sourceToRun chooses what the Job runs and checks that it may: durable inputs the controller
// signed, files to run, the digest of an approved plan, an allowed image. wait is how long the
// op waits when not; the op's condition says why.
func (p *pass) sourceToRun(ctx context.Context, d decide.Decision, rendered inputs.Rendered, renderable bool) (runSource, time.Duration, error) {
	if ok, err := p.durableTrusted(ctx, d.Op); err != nil || !ok {
		return runSource{}, GateRequeue, err
	}
	src, err := p.chooseSource(ctx, d, rendered, renderable)
	switch {
	case err != nil:
		return runSource{}, 0, err
	case src.missing != "":
		setOpCondition(p.status(), p.stamp(), d.Op, metav1.ConditionFalse, conditions.ReasonDurableInputsMissing, src.missing)
		return runSource{}, decide.InputsRequeue, nil
	case src.unpinnedPlan != "":
		if c := conditions.Get(p.status().Conditions, conditionFor(d.Op)); c == nil || c.Reason != conditions.ReasonPlanDigestUnknown {
			logf.FromContext(ctx).Info("refusing the approved apply: its plan's image digest is unknown", "plan", d.ExpectPlan)
			p.event(nil, corev1.EventTypeWarning, EventPlanDigestUnknown, "%s", src.unpinnedPlan)
		}
		setOpCondition(p.status(), p.stamp(), d.Op, metav1.ConditionFalse, conditions.ReasonPlanDigestUnknown, src.unpinnedPlan)
		return runSource{}, GateRequeue, nil
	case !p.imageAllowed(ctx, d.Op, src.image):
		return runSource{}, GateRequeue, nil
	}
	return src, 0, nil
}

// readyToRun checks what must hold before the run Lease is taken, so that nothing in the way
// holds a Lease: the runner's ServiceAccount may run Jobs, the CLI configuration Secret may be
// mounted, the state keys may be used, every env source opted in, the identity's credentials are copied, an approval the op acts on can only have come
// through plans/approval, and the plan key is the controller's. wait is how long to wait when
// not; mirror names the copy of the credentials, planKey the plan-key Secret of a plan or an
// approved apply.
func (p *pass) readyToRun(ctx context.Context, d decide.Decision) (mirror, planKey string, wait time.Duration, err error) {
	ready, err := p.runnerServiceAccountReady(ctx)
	switch {
	case err != nil:
		return "", "", 0, err
	case !ready:
		return "", "", GateRequeue, nil
	}
	ready, err = p.cliConfigReady(ctx, d.Op)
	switch {
	case err != nil:
		return "", "", 0, err
	case !ready:
		return "", "", GateRequeue, nil
	}
	p.stateKeys, ready, err = p.stateKeysReady(ctx, d.Op)
	switch {
	case err != nil:
		return "", "", 0, err
	case !ready:
		return "", "", GateRequeue, nil
	}
	ready, err = p.envSourcesReady(ctx, d.Op)
	switch {
	case err != nil:
		return "", "", 0, err
	case !ready:
		return "", "", GateRequeue, nil
	}
	mirror, mirrored, err := p.mirrorCredentials(ctx)
	switch {
	case err != nil:
		return "", "", 0, err
	case !mirrored:
		return "", "", decide.DependenciesRequeue, nil
	}
	if wait, err := p.approvalGuarded(ctx, d); err != nil || wait > 0 {
		return "", "", wait, err
	}
	planKey, wait, err = p.planKeyFor(ctx, d)
	return mirror, planKey, wait, err
}

// planKeyFor makes or checks the plan key of a plan or an approved apply, and returns its name.
// It runs before the run Lease is taken, so a Secret in the way holds no Lease; wait is how long
// to wait when that Secret is not the controller's.
func (p *pass) planKeyFor(ctx context.Context, d decide.Decision) (planKey string, wait time.Duration, err error) {
	if d.Op != jobs.OpPlan && d.ExpectPlan == "" {
		return "", 0, nil
	}
	planKey, problem, err := p.ensurePlanKey(ctx)
	switch {
	case err != nil:
		return "", 0, err
	case problem != "":
		logf.FromContext(ctx).Info("the plan-key Secret is not the controller's; waiting until it is deleted", "secret", planKey)
		setOpCondition(p.status(), p.stamp(), d.Op, metav1.ConditionFalse, conditions.ReasonPlanKeyNotOwned, problem)
		p.event(nil, corev1.EventTypeWarning, EventPlanKeyNotOwned, "%s", problem)
		return "", GateRequeue, nil
	}
	return planKey, 0, nil
}

// mirrorCredentials copies the identity's credentials for the Job about to start, if the
// object has an identity. mirrored is false when a Secret is in the way: the run waits.
func (p *pass) mirrorCredentials(ctx context.Context) (mirror string, mirrored bool, err error) {
	if p.credentials.Identity == "" {
		return "", true, nil
	}
	mirror, problem, err := p.ensureMirror(ctx, p.credentials)
	if err != nil {
		return "", false, err
	}
	setMirror(p.status(), p.stamp(), mirror, problem)
	return mirror, problem == "", nil
}

// acquireRunLease takes the run Lease for the Job about to be created. When another run holds
// it, the op waits: the condition says so and acquired is false.
func (p *pass) acquireRunLease(ctx context.Context, op jobs.Op, job string) (req lease.Request, acquired bool, err error) {
	deadline := ptr.Deref(p.obj.WorkspaceSpec().Jobs.ActiveDeadlineSeconds, jobspec.DefaultActiveDeadlineSeconds)
	req = lease.Request{
		Namespace: p.obj.GetNamespace(), Name: jobs.RunLeaseName(p.stateSuffix()),
		Job: job, Op: op, Labels: p.ownerLabels(), DeadlineSeconds: deadline,
	}
	acquired, err = lease.Acquire(ctx, p.r.Client, req, p.holder, p.now)
	if err == nil && !acquired {
		p.r.Metrics.LeaseWaits.WithLabelValues(string(p.r.Kind), "run_lease").Inc()
		setOpCondition(p.status(), p.stamp(), op, metav1.ConditionUnknown, conditions.ReasonWaitingForRunLease, "waiting for the run Lease "+req.Name+" held by another run")
	}
	return req, acquired, err
}

// jobAnnotations are the annotations of the Job a decision starts: why it runs (after a failed
// or an interrupted apply, to remediate drift, the restore it performs, the replan request it
// serves) and the approval it carries out, with who gave it, since a successful apply consumes
// the object's annotations.
func jobAnnotations(d decide.Decision, interruptedApply string, objAnnotations map[string]string, exportsHash string, held bool) map[string]string {
	annotations := map[string]string{}
	if d.Op == jobs.OpApply && exportsHash != "" {
		annotations[AnnotationClusterOutputsHash] = exportsHash
		if held {
			annotations[AnnotationHeldClusterOutputs] = "true"
		}
	}
	if d.AfterFailedApply {
		annotations[jobs.AnnotationAfterFailedApply] = "true"
	}
	if d.Op == jobs.OpApply && interruptedApply != "" {
		annotations[jobs.AnnotationAfterInterruptedApply] = interruptedApply
	}
	if d.Names.DriftRemediation {
		annotations[jobs.AnnotationDriftRemediation] = "true"
	}
	if d.ExpectPlan != "" || d.AllowDeletesHash != "" {
		for _, key := range []string{jobs.AnnotationApprovedBy, jobs.AnnotationApprovedAt} {
			if v := objAnnotations[key]; v != "" {
				annotations[key] = v
			}
		}
	}
	if d.ExpectPlan != "" {
		annotations[jobs.AnnotationApprovedPlan] = d.ExpectPlan
	}
	if d.Op == jobs.OpRestore {
		annotations[jobs.AnnotationRestoreSerial] = d.RestoreSerial
	}
	if d.Replan != "" {
		annotations[jobs.AnnotationReplan] = d.Replan
	}
	return annotations
}

// reportStarted records a started Job in the status, the log, events and metrics.
func (p *pass) reportStarted(ctx context.Context, created *batchv1.Job, d decide.Decision, attempt int32, src runSource, lock LockVerdict) {
	status := p.status()
	setJobStarted(status, p.stamp(), created.Name, d.Op, attempt, d.Reason)
	logf.FromContext(ctx).Info("started Job", "job", created.Name, "op", d.Op, "attempt", attempt, "reason", d.Reason, "image", src.image)
	if dropped := jobspec.DroppedEnv(p.obj.WorkspaceSpec().Jobs); len(dropped) > 0 {
		p.event(created, corev1.EventTypeWarning, EventEnvDropped, "Left out environment variables the runner controls: %v", dropped)
	}
	p.event(created, corev1.EventTypeNormal, EventJobCreated, "Started %s Job %s, attempt %d (%s)", d.Op, created.Name, attempt, d.Reason)
	p.r.Metrics.Started(p.r.Kind, d.Op, jobs.RetryNumber(created, p.jobs))
	if src.digestUnknown {
		p.event(created, corev1.EventTypeWarning, EventDigestUnknown, "Job %s runs %s as written: no digest is pinned for it yet", created.Name, src.image)
	}
	switch {
	case lock.StaleID != "":
		p.r.Metrics.ForceUnlocks.WithLabelValues(string(p.r.Kind)).Inc()
		p.event(created, corev1.EventTypeWarning, EventForceUnlocked, "Job %s releases the stale state lock %s, left by a pod of this object's Jobs that is gone or finished", created.Name, lock.StaleID)
	case lock.HeldBy != "":
		setStateLocked(status, p.stamp(), lock.HeldBy)
		p.event(created, corev1.EventTypeWarning, EventStateLocked, "The state is locked (%s); Job %s waits up to lockTimeoutSeconds for it", lock.HeldBy, created.Name)
	}
	switch {
	case d.ExpectPlan != "":
		p.event(created, corev1.EventTypeNormal, EventPlanApproved, "Applying the approved plan %s", d.ExpectPlan)
	case d.Names.DriftRemediation:
		p.event(created, corev1.EventTypeNormal, EventDriftRemediationStarted, "Applying the current inputs again to remediate drift")
		setRemediating(status, p.stamp(), created.Name)
	}
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
		// The identity an apply ran with: a machine keeps it once provisioned.
		secret.Annotations[AnnotationIdentity] = p.credentials.Identity
		p.signDurable(&secret)
		if err := p.r.Client.Create(ctx, &secret); err != nil {
			return fmt.Errorf("creating the durable inputs Secret: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("reading the durable inputs Secret: %w", err)
	}
	image := p.obj.WorkspaceSpec().Source.Image
	if string(secret.Data[inputs.MainFile]) == string(rendered.Main) && string(secret.Data[inputs.VarsFile]) == string(rendered.Vars) &&
		secret.Annotations[jobs.AnnotationImage] == image && secret.Annotations[AnnotationIdentity] == p.credentials.Identity {
		return nil
	}
	held := secret.Data[AppliedClusterOutputsKey]
	secret.Data = rendered.Data()
	if held != nil {
		// A pool's exports of its last successful apply outlive the inputs of the next.
		secret.Data[AppliedClusterOutputsKey] = held
	}
	if secret.Annotations == nil {
		secret.Annotations = map[string]string{}
	}
	if secret.Annotations[jobs.AnnotationImage] != image {
		// A digest pins the image it was pulled for; the next successful apply pins again.
		delete(secret.Annotations, jobs.AnnotationImageDigest)
	}
	secret.Annotations[jobs.AnnotationImage] = image
	secret.Annotations[AnnotationIdentity] = p.credentials.Identity
	p.signDurable(&secret)
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

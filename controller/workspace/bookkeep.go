package workspace

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/jobspec"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/runkey"
)

// booked is a Job this pass booked: the annotations to write on it after the status patch.
type booked struct {
	job         *batchv1.Job
	annotations map[string]string
	outcome     jobs.Outcome
	ran         time.Duration
	retry       int
	summary     jobs.Summary
	// extraEvents are emitted with the Job's own event, once.
	extraEvents []event
}

type event struct{ eventType, reason, note string }

// bookkeep books every finished Job not booked before: it reads the runner's result from the
// pod, classifies the Job with the run model, and writes the result into status and conditions.
// The marks that say it was booked are written only after the status patch succeeded, so a failed
// patch reads the Job again in the next pass.
func (p *pass) bookkeep(ctx context.Context) error {
	for i := range p.jobs {
		job := &p.jobs[i]
		if _, done := job.Annotations[jobs.AnnotationBookkept]; done || !jobs.OutcomeOf(job).Finished() {
			continue
		}
		result, imageID, err := p.readResult(ctx, job)
		if err != nil {
			return err
		}
		marks := jobs.BookkeepingMarks(job, result)
		if digest := jobs.DigestOf(imageID); digest != "" {
			if marks == nil {
				marks = map[string]string{}
			}
			// Kept on the Job: its pod is not read again, and an approved apply runs the digest
			// its plan ran.
			marks[jobs.AnnotationImageDigest] = digest
		}
		if job.Annotations == nil {
			job.Annotations = map[string]string{}
		}
		for k, v := range marks {
			job.Annotations[k] = v
		}
		outcome := jobs.OutcomeOf(job)
		finished, _ := jobs.FinishedAt(job)
		started, _ := jobs.StartedAt(job)
		summary := jobs.NewSummary(outcome, finished, result)
		encoded, err := jobs.EncodeSummary(summary)
		if err != nil {
			return fmt.Errorf("encoding the result of Job %s: %w", job.Name, err)
		}
		annotations := map[string]string{jobs.AnnotationBookkept: "true", jobs.AnnotationResult: encoded, runkey.AnnotationResultDigest: runkey.ResultDigest(encoded)}
		for k, v := range marks {
			annotations[k] = v
		}
		job.Annotations[jobs.AnnotationBookkept] = "true"
		job.Annotations[jobs.AnnotationResult] = encoded
		p.booked = append(p.booked, booked{
			job: job, annotations: annotations, outcome: outcome, ran: finished.Sub(started),
			retry: jobs.RetryNumber(job, p.jobs), summary: summary,
		})
	}
	// Status reports the newest booked Job of each op last, so it wins.
	for i := range p.booked {
		if err := p.record(ctx, &p.booked[i]); err != nil {
			return err
		}
	}
	if status := p.status(); status.ActiveJob != nil {
		for _, b := range p.booked {
			if b.job.Name == status.ActiveJob.Name {
				status.ActiveJob = nil
			}
		}
	}
	return nil
}

// readResult reads the runner's result document from the termination message of the Job's
// newest pod, and the image that pod's source container ran. A missing or unreadable result is
// no result: the Job's own outcome still holds.
func (p *pass) readResult(ctx context.Context, job *batchv1.Job) (*jobs.RunnerResult, string, error) {
	pods, err := p.podsOf(ctx, job)
	if err != nil {
		return nil, "", err
	}
	// Anyone who may create pods can copy the Job's owner reference: only a pod that runs the
	// Job's own template speaks for it. The cached Job has no template; the live one does.
	var full batchv1.Job
	if len(pods) > 0 {
		if err := p.r.APIReader.Get(ctx, client.ObjectKeyFromObject(job), &full); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, "", nil
			}
			return nil, "", fmt.Errorf("reading Job %s: %w", job.Name, err)
		}
	}
	var message, imageID string
	var newest *corev1.Pod
	for i := range pods {
		if full.UID != job.UID || !runsTemplate(&pods[i].Spec, &full.Spec.Template.Spec) {
			logf.FromContext(ctx).Info("ignoring a pod of the Job that does not run its template", "job", job.Name, "pod", pods[i].Name)
			continue
		}
		if newest == nil || newest.CreationTimestamp.Before(&pods[i].CreationTimestamp) {
			newest = &pods[i]
		}
	}
	if newest != nil {
		for _, cs := range newest.Status.ContainerStatuses {
			if cs.Name == jobspec.SourceContainer {
				imageID = cs.ImageID
				if cs.State.Terminated != nil {
					message = cs.State.Terminated.Message
				}
			}
		}
	}
	if strings.TrimSpace(message) == "" {
		return nil, imageID, nil
	}
	result, err := jobs.ParseRunnerResult([]byte(message))
	if err != nil {
		logf.FromContext(ctx).Info("unreadable runner result", "job", job.Name, "error", err.Error())
		return nil, imageID, nil
	}
	return &result, imageID, nil
}

// record writes a booked Job's result into status (setBooked) and carries out what a success
// changes elsewhere: the state's inputs hash, the pinned image, the approvals used up. Its events
// wait in b.extraEvents for the pass that writes the bookkept mark.
func (p *pass) record(ctx context.Context, b *booked) error {
	status := p.status()
	finished := p.now
	if b.summary.FinishedAt != nil {
		finished = b.summary.FinishedAt.Time
	}
	driftWasDetected := conditions.IsTrue(status.Conditions, conditions.DriftDetected)
	setBooked(status, p.planSlot(), p.stamp(), bookedRun{job: b.job, outcome: b.outcome, summary: b.summary, finished: finished}, p.r.KindInfo.DriftPolicy(p.obj), p.obj.GetNamespace())
	if err := p.actOnSuccess(ctx, b); err != nil {
		return err
	}
	var preview *infrav1.PlanPreview
	if slot := p.planSlot(); slot != nil && *slot != nil && (*slot).Job == b.job.Name {
		preview = *slot
	}
	b.extraEvents = append(b.extraEvents, bookedEvents(b, preview, driftWasDetected)...)
	return nil
}

// actOnSuccess does what a successful apply or restore leaves to the controller: the state
// records the inputs it was made from, an apply pins its image and consumes the approvals it
// carried out, and a restore consumes its request.
func (p *pass) actOnSuccess(ctx context.Context, b *booked) error {
	if p.r.Kind == jobs.KindMachinePool && jobs.OpOf(b.job) == jobs.OpApply {
		switch {
		case b.outcome == jobs.OutcomeBlocked:
			return p.recordBlockedExports(ctx, b.job)
		case !b.outcome.Succeeded():
			return p.recordFailedExports(ctx, b.job)
		}
	}
	if !b.outcome.Succeeded() {
		return nil
	}
	switch jobs.OpOf(b.job) {
	case jobs.OpApply:
		if err := p.adoptState(ctx, b.job); err != nil {
			return err
		}
		if err := p.pinSource(ctx, b); err != nil {
			return err
		}
		return p.consumeApprovals(ctx, b)
	case jobs.OpRestore:
		if err := p.adoptState(ctx, b.job); err != nil {
			return err
		}
		if p.obj.GetAnnotations()[jobs.AnnotationRestoreState] == b.job.Annotations[jobs.AnnotationRestoreSerial] {
			p.consumed = append(p.consumed, jobs.AnnotationRestoreState)
		}
	}
	return nil
}

// bookedEvents are the events a booked Job adds to its JobSucceeded or JobFailed one: the plan it
// made (preview is the object's plan when this Job made it), the drift its check found or its
// apply resolved, the state it restored, the approved plan it did not get.
func bookedEvents(b *booked, preview *infrav1.PlanPreview, driftWasDetected bool) []event {
	op, name := jobs.OpOf(b.job), b.job.Name
	switch {
	case b.outcome.Succeeded() && op == jobs.OpPlan && preview != nil:
		return []event{{corev1.EventTypeNormal, EventPlanReady, fmt.Sprintf("Plan %s of Job %s: %d to add, %d to change, %d to destroy", preview.PlanHash, name, preview.Add, preview.Change, preview.Destroy)}}
	case b.outcome.Succeeded() && op == jobs.OpApply && driftWasDetected:
		return []event{{corev1.EventTypeNormal, EventDriftResolved, "Job " + name + " applied the inputs again"}}
	case b.outcome.Succeeded() && op == jobs.OpRestore:
		return []event{{corev1.EventTypeNormal, EventStateRestored, "Job " + name + " restored state serial " + b.job.Annotations[jobs.AnnotationRestoreSerial]}}
	case b.outcome.Succeeded() && op == jobs.OpDrift && b.summary.Drift != nil && b.summary.Drift.Detected:
		d := b.summary.Drift
		return []event{{corev1.EventTypeWarning, EventDriftDetected, fmt.Sprintf("Job %s found drift: %d to add, %d to change, %d to destroy", name, d.Add, d.Change, d.Destroy)}}
	case b.outcome == jobs.OutcomePlanChanged && preview != nil:
		return []event{{corev1.EventTypeWarning, EventPlanChanged, fmt.Sprintf("Job %s planned %s instead of the approved %s; nothing was applied", name, preview.PlanHash, b.job.Annotations[jobs.AnnotationApprovedPlan])}}
	}
	return nil
}

// adoptState records the applied inputs hash on the state Secret and makes the object its
// (non-controller) owner: the hash is what later passes compare the rendered inputs with.
func (p *pass) adoptState(ctx context.Context, job *batchv1.Job) error {
	hash := job.Annotations[jobs.AnnotationInputsHash]
	if hash == "" {
		return nil
	}
	var secret corev1.Secret
	key := client.ObjectKey{Namespace: p.obj.GetNamespace(), Name: state.SecretName(p.stateSuffix())}
	if err := p.r.APIReader.Get(ctx, key, &secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // an apply that created nothing leaves no state
		}
		return fmt.Errorf("reading the state Secret: %w", err)
	}
	// Only a newer apply may record its hash: a late bookkeeping of an older apply must not
	// overwrite the hash of the state that a newer one wrote. A restore always records the
	// backup's hash, since it replaced the state.
	if jobs.OpOf(job) == jobs.OpApply && newerApplySucceeded(p.jobs, job) {
		return nil
	}
	owned := false
	for _, ref := range secret.OwnerReferences {
		owned = owned || ref.UID == p.obj.GetUID()
	}
	if secret.Annotations[state.InputsHashAnnotation] == hash && owned {
		return nil
	}
	patch := client.MergeFrom(secret.DeepCopy())
	if secret.Annotations == nil {
		secret.Annotations = map[string]string{}
	}
	secret.Annotations[state.InputsHashAnnotation] = hash
	if !owned {
		secret.OwnerReferences = append(secret.OwnerReferences, p.ownerRef(false))
	}
	if err := p.r.Client.Patch(ctx, &secret, patch); err != nil {
		return fmt.Errorf("recording the inputs hash on the state Secret: %w", err)
	}
	return nil
}

func newerApplySucceeded(all []batchv1.Job, job *batchv1.Job) bool {
	for _, j := range jobs.OpJobs(all, jobs.OpApply) {
		if j.Name == job.Name {
			return false
		}
		if jobs.OutcomeOf(j).Succeeded() {
			return true
		}
	}
	return false
}

// afterStatusPatch finishes what the status patch made durable: for each booked Job the
// per-run Secret's deletion, the bookkept mark, then once per Job the events and metrics and the
// Lease's release, and last the pruning of history beyond the limits.
func (p *pass) afterStatusPatch(ctx context.Context) error {
	if len(p.booked) == 0 {
		return nil
	}
	for _, b := range p.booked {
		var current batchv1.Job
		if err := p.r.APIReader.Get(ctx, client.ObjectKeyFromObject(b.job), &current); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return fmt.Errorf("reading Job %s: %w", b.job.Name, err)
		}
		if _, done := current.Annotations[jobs.AnnotationBookkept]; done {
			continue // another pass booked it first
		}
		if p.r.RunKey != nil && !p.r.RunKey.JobSigned(&current) {
			// Changed by someone else since the pass read it: signing it now would vouch for
			// what they wrote. It is no run of the object any more.
			logf.FromContext(ctx).Info("not marking a Job whose signature no longer verifies", "job", current.Name)
			continue
		}
		// The per-run Secret goes before the mark: the mark says it is gone, and a booked Job is
		// never looked at again, so a Secret deleted after it could outlive a crash.
		if err := p.r.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: current.Namespace, Name: jobs.RunSecretName(current.Name)}}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting the per-run Secret of %s: %w", current.Name, err)
		}
		patch := client.MergeFromWithOptions(current.DeepCopy(), client.MergeFromWithOptimisticLock{})
		if current.Annotations == nil {
			current.Annotations = map[string]string{}
		}
		for k, v := range b.annotations {
			current.Annotations[k] = v
		}
		if p.r.RunKey != nil {
			current.Annotations[runkey.AnnotationSignature] = p.r.RunKey.SignJob(&current)
		}
		if err := p.r.Client.Patch(ctx, &current, patch); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				continue
			}
			return fmt.Errorf("marking Job %s bookkept: %w", b.job.Name, err)
		}
		logf.FromContext(ctx).Info("booked Job", "job", current.Name, "op", jobs.OpOf(&current), "outcome", b.outcome, "retry", b.retry)
		p.announce(&b)
		if err := p.releaseLease(ctx, current.Name); err != nil {
			logf.FromContext(ctx).Error(err, "giving back the run Lease", "job", current.Name)
		}
	}
	if err := p.removeObjectAnnotations(ctx); err != nil {
		return err
	}
	return p.prune(ctx)
}

// removeObjectAnnotations drops the approvals a successful apply consumed.
func (p *pass) removeObjectAnnotations(ctx context.Context) error {
	if len(p.consumed) == 0 {
		return nil
	}
	patch := client.MergeFrom(p.obj.DeepCopyObject().(client.Object))
	annotations := p.obj.GetAnnotations()
	for _, key := range p.consumed {
		delete(annotations, key)
	}
	p.obj.SetAnnotations(annotations)
	if err := p.r.Client.Patch(ctx, p.obj, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing consumed approvals: %w", err)
	}
	return nil
}

// consumeApprovals clears what a successful apply used up (setBooked cleared status.plan): the
// approval of the plan, an approval of a destructive plan of these inputs, and the marker of an apply
// that disappeared while it ran, once an apply started after it succeeded.
func (p *pass) consumeApprovals(ctx context.Context, b *booked) error {
	approvals := jobs.ApprovalsOf(p.obj.GetAnnotations())
	if hash := b.job.Annotations[jobs.AnnotationApprovedPlan]; hash != "" {
		if approvals.Plan == hash {
			p.consumed = append(p.consumed, jobs.AnnotationApprovePlan, jobs.AnnotationApprovedBy, jobs.AnnotationApprovedAt)
		}
		b.extraEvents = append(b.extraEvents, event{corev1.EventTypeNormal, EventPlanApplied, "Job " + b.job.Name + " applied the approved plan " + hash})
	}
	if inputsHash := b.job.Annotations[jobs.AnnotationInputsHash]; inputsHash != "" && approvals.DestructivePlan == inputsHash {
		p.consumed = append(p.consumed, jobs.AnnotationApproveDestructivePlan, jobs.AnnotationApprovedBy, jobs.AnnotationApprovedAt)
		b.extraEvents = append(b.extraEvents, event{corev1.EventTypeNormal, EventDestructivePlanApprovalConsumed, "Job " + b.job.Name + " applied the approved destructive plan of inputs " + inputsHash})
	}
	vanished := b.job.Annotations[jobs.AnnotationAfterInterruptedApply]
	if vanished == "" {
		return nil
	}
	durable, err := p.readDurable(ctx)
	if err != nil || durable.Annotations[jobs.AnnotationInterruptedApply] != vanished {
		return err
	}
	patch := client.MergeFrom(durable.DeepCopy())
	delete(durable.Annotations, jobs.AnnotationInterruptedApply)
	if err := p.r.Client.Patch(ctx, durable, patch); err != nil {
		return fmt.Errorf("clearing the interrupted apply: %w", err)
	}
	return nil
}

// announce emits the booked Job's event and metrics, once per Job: only the pass that wrote its
// bookkept mark gets here.
func (p *pass) announce(b *booked) {
	op := jobs.OpOf(b.job)
	p.r.Metrics.Finished(p.r.Kind, op, b.outcome, b.ran, b.retry)
	msg := bookedRun{job: b.job, outcome: b.outcome, summary: b.summary}.describe()
	for _, e := range b.extraEvents {
		p.event(b.job, e.eventType, e.reason, "%s", e.note)
	}
	switch b.outcome {
	case jobs.OutcomeSucceeded:
		p.event(b.job, corev1.EventTypeNormal, EventJobSucceeded, "%s", msg)
	case jobs.OutcomeDeadlineExceeded:
		p.event(b.job, corev1.EventTypeWarning, EventJobDeadlineExceeded, "%s", msg)
	case jobs.OutcomeInterrupted:
		p.event(b.job, corev1.EventTypeWarning, EventJobInterrupted, "%s", msg)
	case jobs.OutcomeBlocked:
		p.event(b.job, corev1.EventTypeWarning, EventDestructivePlanBlocked, "%s", msg)
	default:
		p.event(b.job, corev1.EventTypeWarning, EventJobFailed, "%s", msg)
	}
}

func (p *pass) releaseLease(ctx context.Context, job string) error {
	return leaseRelease(ctx, p.r.Client, p.obj.GetNamespace(), jobs.RunLeaseName(p.stateSuffix()), job)
}

// prune deletes finished Jobs beyond the history limits, as the run model selects them; their
// pods go with them.
func (p *pass) prune(ctx context.Context) error {
	background := metav1.DeletePropagationBackground
	for _, name := range jobs.Prune(p.jobs, jobs.LimitsOf(p.obj.WorkspaceSpec().Jobs)) {
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: p.obj.GetNamespace(), Name: name}}
		if err := p.r.Client.Delete(ctx, job, &client.DeleteOptions{PropagationPolicy: &background}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("pruning Job %s: %w", name, err)
		}
		logf.FromContext(ctx).Info("pruned Job beyond the history limits", "job", name)
	}
	return nil
}

// serviceAccountTokenPath is where the API server's admission mounts a pod's ServiceAccount
// token: the one mount a pod of a Job has that its template does not.
const serviceAccountTokenPath = "/var/run/secrets/kubernetes.io/serviceaccount"

// runsTemplate reports whether a pod runs what template says: the same ServiceAccount, each of
// the template's containers and init containers as written (image, command, arguments,
// environment, working directory, mounts: nothing beside them but the ServiceAccount token), and
// the template's volumes. A container the pod adds (a mesh's sidecar) may not mount any of the
// template's volumes. A pod that differs could have run other code or read other inputs, so
// its termination message is not the runner's result.
func runsTemplate(pod, template *corev1.PodSpec) bool {
	if pod.ServiceAccountName != template.ServiceAccountName {
		return false
	}
	shared := map[string]bool{}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	for _, v := range template.Volumes {
		shared[v.Name] = true
		if got, ok := volumes[v.Name]; !ok || !equality.Semantic.DeepEqual(got.VolumeSource, v.VolumeSource) {
			return false
		}
	}
	return sameContainers(pod.InitContainers, template.InitContainers, shared) && sameContainers(pod.Containers, template.Containers, shared)
}

// sameContainers reports whether pod holds each container of template as runsTemplate says, and
// its other containers mount none of the shared volumes.
func sameContainers(pod, template []corev1.Container, shared map[string]bool) bool {
	want := map[string]*corev1.Container{}
	for i := range template {
		want[template[i].Name] = &template[i]
	}
	found := 0
	for _, p := range pod {
		t, ok := want[p.Name]
		if !ok {
			for _, m := range p.VolumeMounts {
				if shared[m.Name] {
					return false
				}
			}
			continue
		}
		found++
		if p.Image != t.Image || p.WorkingDir != t.WorkingDir || !slices.Equal(p.Command, t.Command) || !slices.Equal(p.Args, t.Args) ||
			!equality.Semantic.DeepEqual(p.Env, t.Env) || !equality.Semantic.DeepEqual(p.EnvFrom, t.EnvFrom) {
			return false
		}
		mounts := slices.DeleteFunc(slices.Clone(p.VolumeMounts), func(m corev1.VolumeMount) bool { return m.MountPath == serviceAccountTokenPath })
		if len(mounts) != len(t.VolumeMounts) || (len(mounts) > 0 && !equality.Semantic.DeepEqual(mounts, t.VolumeMounts)) {
			return false
		}
	}
	return found == len(template)
}

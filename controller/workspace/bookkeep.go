package workspace

import (
	"context"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/jobspec"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/jobs"
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
		annotations := map[string]string{jobs.AnnotationBookkept: "true", jobs.AnnotationResult: encoded}
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
	var message, imageID string
	var newest *corev1.Pod
	for i := range pods {
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

// record writes a booked Job's result into status and conditions.
func (p *pass) record(ctx context.Context, b *booked) error {
	status := p.status()
	op := jobs.OpOf(b.job)
	finished := metav1.NewTime(b.summary.FinishedAt.Time)
	if b.summary.FinishedAt == nil {
		finished = metav1.NewTime(p.now)
	}
	last := &infrav1.LastRun{Job: b.job.Name, Operation: infrav1.Operation(op), Outcome: string(b.outcome), FinishedAt: &finished}
	if e := b.summary.Error; e != nil {
		last.Error = &infrav1.RunError{Kind: string(e.Kind), Step: e.Step, Summary: e.Summary}
	}
	if d := b.summary.Drift; d != nil {
		last.Drift = &infrav1.DriftSummary{Add: int32(d.Add), Change: int32(d.Change), Destroy: int32(d.Destroy)}
		for _, r := range d.Resources {
			last.Drift.Resources = append(last.Drift.Resources, r.Address)
		}
	}
	if status.LastRun == nil || status.LastRun.FinishedAt == nil || !finished.Before(status.LastRun.FinishedAt) {
		status.LastRun = last
	}

	gen := p.obj.GetGeneration()
	conds := &status.Conditions
	message := describe(b)
	switch {
	case b.outcome.Succeeded() && op == jobs.OpPlan:
		if preview := p.recordPlan(b.job, b.summary.Plan, finished.Time); preview != nil {
			conditions.Set(conds, conditions.ApplyJobSucceeded, metav1.ConditionUnknown, ReasonPlanAwaitingApproval, approveMessage(p.obj, preview), gen, p.now)
			b.extraEvents = append(b.extraEvents, event{corev1.EventTypeNormal, EventPlanReady, fmt.Sprintf("Plan %s of Job %s: %d to add, %d to change, %d to destroy", preview.PlanHash, b.job.Name, preview.Add, preview.Change, preview.Destroy)})
		}
	case b.outcome.Succeeded():
		switch op {
		case jobs.OpApply:
			conditions.Set(conds, conditions.ApplyJobSucceeded, metav1.ConditionTrue, conditions.ReasonApplySucceeded, message, gen, p.now)
			status.Initialization = &infrav1.Initialization{Provisioned: ptr.To(true)}
			if err := p.adoptState(ctx, b.job); err != nil {
				return err
			}
			if err := p.pinSource(ctx, b); err != nil {
				return err
			}
			if err := p.consumeApprovals(ctx, b); err != nil {
				return err
			}
			if c := conditions.Get(*conds, conditions.DriftDetected); c != nil && c.Status == metav1.ConditionTrue {
				conditions.Set(conds, conditions.DriftDetected, metav1.ConditionFalse, conditions.ReasonNoDrift, "resolved by Job "+b.job.Name, gen, p.now)
				b.extraEvents = append(b.extraEvents, event{corev1.EventTypeNormal, EventDriftResolved, "Job " + b.job.Name + " applied the inputs again"})
			}
		case jobs.OpDestroy:
			conditions.Set(conds, conditions.ApplyJobSucceeded, metav1.ConditionTrue, conditions.ReasonDestroySucceeded, message, gen, p.now)
		case jobs.OpRestore:
			conditions.Set(conds, conditions.RestoreJobSucceeded, metav1.ConditionTrue, conditions.ReasonStateRestored, message, gen, p.now)
			if err := p.adoptState(ctx, b.job); err != nil {
				return err
			}
			if p.obj.GetAnnotations()[jobs.AnnotationRestoreState] == b.job.Annotations[jobs.AnnotationRestoreSerial] {
				p.consumed = append(p.consumed, jobs.AnnotationRestoreState)
			}
			b.extraEvents = append(b.extraEvents, event{corev1.EventTypeNormal, EventStateRestored, "Job " + b.job.Name + " restored state serial " + b.job.Annotations[jobs.AnnotationRestoreSerial]})
		case jobs.OpRefresh:
			status.LastRefresh = &finished
			conditions.Set(conds, conditions.DriftJobSucceeded, metav1.ConditionTrue, conditions.ReasonDriftChecked, message, gen, p.now)
		case jobs.OpDrift:
			status.LastDriftCheck = &finished
			conditions.Set(conds, conditions.DriftJobSucceeded, metav1.ConditionTrue, conditions.ReasonDriftChecked, message, gen, p.now)
			if d := b.summary.Drift; d != nil && d.Detected {
				reason := conditions.ReasonDriftReported
				if p.obj.DriftPolicy().Action == infrav1.DriftActionRemediate {
					reason = ReasonDriftPending
				}
				conditions.Set(conds, conditions.DriftDetected, metav1.ConditionTrue, reason,
					fmt.Sprintf("%d to add, %d to change, %d to destroy", d.Add, d.Change, d.Destroy), gen, p.now)
				b.extraEvents = append(b.extraEvents, event{corev1.EventTypeWarning, EventDriftDetected, fmt.Sprintf("Job %s found drift: %d to add, %d to change, %d to destroy", b.job.Name, d.Add, d.Change, d.Destroy)})
			} else {
				conditions.Set(conds, conditions.DriftDetected, metav1.ConditionFalse, conditions.ReasonNoDrift, "the infrastructure matches the state", gen, p.now)
			}
		}
	case b.outcome == jobs.OutcomeInterrupted:
		p.setCondition(op, metav1.ConditionUnknown, conditions.ReasonJobInterrupted, message)
	case b.outcome == jobs.OutcomePlanChanged:
		if preview := p.recordPlan(b.job, b.summary.Plan, finished.Time); preview != nil {
			conditions.Set(conds, conditions.ApplyJobSucceeded, metav1.ConditionUnknown, ReasonPlanChanged,
				"the approved plan no longer matched; the new "+approveMessage(p.obj, preview), gen, p.now)
			b.extraEvents = append(b.extraEvents, event{corev1.EventTypeWarning, EventPlanChanged, fmt.Sprintf("Job %s planned %s instead of the approved %s; nothing was applied", b.job.Name, preview.PlanHash, b.job.Annotations[jobs.AnnotationApprovedPlan])})
		}
	case b.outcome == jobs.OutcomeBlocked:
		conditions.Set(conds, conditions.ApplyJobSucceeded, metav1.ConditionFalse, ReasonDestructivePlanBlocked, blockedMessage(b.job, b.summary.Plan), gen, p.now)
	default:
		p.setCondition(op, metav1.ConditionFalse, failureReason(op, b.outcome), message)
	}
	conditions.SetReady(conds, gen, p.now)
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

func failureReason(op jobs.Op, outcome jobs.Outcome) string {
	switch {
	case outcome == jobs.OutcomeDeadlineExceeded && (op == jobs.OpRefresh || op == jobs.OpDrift):
		return conditions.ReasonDriftJobDeadline
	case outcome == jobs.OutcomeDeadlineExceeded:
		return conditions.ReasonJobDeadlineExceeded
	case op == jobs.OpRefresh || op == jobs.OpDrift:
		return conditions.ReasonDriftJobFailed
	case op == jobs.OpDestroy:
		return conditions.ReasonDestroyFailed
	case op == jobs.OpRestore:
		return conditions.ReasonRestoreFailed
	}
	return conditions.ReasonApplyFailed
}

// describe is the condition message of a booked Job.
func describe(b *booked) string {
	msg := fmt.Sprintf("Job %s: %s", b.job.Name, strings.ToLower(string(b.outcome)))
	if e := b.summary.Error; e != nil {
		if e.Step != "" {
			msg += fmt.Sprintf(" in step %s", e.Step)
		}
		if e.Summary != "" {
			msg += ": " + e.Summary
		}
	}
	return msg
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
		if err := p.r.Client.Patch(ctx, &current, patch); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				continue
			}
			return fmt.Errorf("marking Job %s bookkept: %w", b.job.Name, err)
		}
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

// consumeApprovals clears what a successful apply used up: the approved plan (status.plan and
// its approval), an approval of a destructive plan of these inputs, and the marker of an apply
// that disappeared while it ran, once an apply started after it succeeded.
func (p *pass) consumeApprovals(ctx context.Context, b *booked) error {
	annotations := p.obj.GetAnnotations()
	if hash := b.job.Annotations[jobs.AnnotationApprovedPlan]; hash != "" {
		if planned, ok := p.obj.(infrav1.Planned); ok {
			*planned.PlanPreview() = nil
		}
		if annotations[jobs.AnnotationApprovePlan] == hash {
			p.consumed = append(p.consumed, jobs.AnnotationApprovePlan, jobs.AnnotationApprovedBy, jobs.AnnotationApprovedAt)
		}
		b.extraEvents = append(b.extraEvents, event{corev1.EventTypeNormal, EventPlanApplied, "Job " + b.job.Name + " applied the approved plan " + hash})
	}
	if inputsHash := b.job.Annotations[jobs.AnnotationInputsHash]; inputsHash != "" && annotations[jobs.AnnotationApproveDestructivePlan] == inputsHash {
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
	msg := describe(b)
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
	}
	return nil
}

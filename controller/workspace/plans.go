package workspace

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/decide"
	"github.com/captf/captf/jobs"
)

// planKeyBytes is the size of the key behind the plan hash.
const planKeyBytes = 32

// Reasons of the plan and approval flow.
const (
	ReasonPlanAwaitingApproval   = "PlanAwaitingApproval"
	ReasonPlanChanged            = "PlanChanged"
	ReasonDestructivePlanBlocked = "DestructivePlanBlocked"
	ReasonDriftPending           = "DriftPending"
)

// ensurePlanKey creates the object's plan-key Secret the first time a plan needs it; it is
// never rotated, so a plan hash stays valid for the object's life.
func (p *pass) ensurePlanKey(ctx context.Context) (string, error) {
	name := jobs.PlanKeySecretName(p.r.Kind, p.obj.GetName())
	var existing corev1.Secret
	err := p.r.APIReader.Get(ctx, client.ObjectKey{Namespace: p.obj.GetNamespace(), Name: name}, &existing)
	switch {
	case err == nil:
		return name, nil
	case !apierrors.IsNotFound(err):
		return "", fmt.Errorf("reading the plan key: %w", err)
	}
	key := make([]byte, planKeyBytes)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("generating the plan key: %w", err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: p.obj.GetNamespace(), Labels: p.ownerLabels(),
			OwnerReferences: []metav1.OwnerReference{p.ownerRef(false)},
		},
		Data: map[string][]byte{"key": key},
	}
	if err := p.r.Client.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating the plan key: %w", err)
	}
	return name, nil
}

// readDurable reads the durable inputs Secret from the API server; a missing one is empty.
func (p *pass) readDurable(ctx context.Context) (*corev1.Secret, error) {
	var secret corev1.Secret
	err := p.r.APIReader.Get(ctx, client.ObjectKey{Namespace: p.obj.GetNamespace(), Name: jobs.InputsSecretName(p.r.Kind, p.obj.GetName())}, &secret)
	if apierrors.IsNotFound(err) {
		return &corev1.Secret{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the durable inputs Secret: %w", err)
	}
	return &secret, nil
}

// markApplied sets captf.io/applied on the durable inputs Secret, read live. Only the Secret's
// deletion removes it, so a state that goes missing later reads as lost instead of new.
func (p *pass) markApplied(ctx context.Context) error {
	durable, err := p.readDurable(ctx)
	if err != nil || durable.Name == "" || durable.Annotations[jobs.AnnotationApplied] == "true" {
		return err
	}
	patch := client.MergeFrom(durable.DeepCopy())
	if durable.Annotations == nil {
		durable.Annotations = map[string]string{}
	}
	durable.Annotations[jobs.AnnotationApplied] = "true"
	if err := p.r.Client.Patch(ctx, durable, patch); err != nil {
		return fmt.Errorf("marking the durable inputs applied: %w", err)
	}
	return nil
}

// vanished handles a Job that status.activeJob names and the API server no longer has. An apply
// of a cluster or pool deleted while it ran may have applied part of its change: confirmed by
// the live object still naming it, it is recorded on the durable inputs Secret so that an apply
// of the current inputs stays due. A machine records nothing.
func (p *pass) vanished(ctx context.Context, active *infrav1.ActiveJob) error {
	if active.Operation != infrav1.Operation(jobs.OpApply) || p.r.Kind == jobs.KindMachine {
		return nil
	}
	live := p.r.NewObject()
	if err := p.r.APIReader.Get(ctx, client.ObjectKeyFromObject(p.obj), live); err != nil {
		return fmt.Errorf("reading the live object: %w", err)
	}
	if a := live.WorkspaceStatus().ActiveJob; a == nil || a.Name != active.Name {
		return nil
	}
	durable, err := p.readDurable(ctx)
	if err != nil || durable.Name == "" {
		return err
	}
	if durable.Annotations[jobs.AnnotationInterruptedApply] == active.Name {
		return nil
	}
	patch := client.MergeFrom(durable.DeepCopy())
	if durable.Annotations == nil {
		durable.Annotations = map[string]string{}
	}
	durable.Annotations[jobs.AnnotationInterruptedApply] = active.Name
	if err := p.r.Client.Patch(ctx, durable, patch); err != nil {
		return fmt.Errorf("recording the interrupted apply: %w", err)
	}
	conditions.Set(&p.status().Conditions, conditions.ApplyJobSucceeded, metav1.ConditionFalse, conditions.ReasonApplyFailed,
		InterruptedApplyMessage(active.Name), p.obj.GetGeneration(), p.now)
	conditions.SetReady(&p.status().Conditions, p.obj.GetGeneration(), p.now)
	p.event(nil, corev1.EventTypeWarning, EventJobInterrupted, "%s", InterruptedApplyMessage(active.Name))
	return nil
}

// InterruptedApplyMessage is the condition message of an apply that disappeared while it ran.
func InterruptedApplyMessage(job string) string {
	return "Job " + job + ": disappeared while it ran and may have applied part of its change; an apply of the current inputs is due"
}

// waitCondition says why a due operation waits for a person.
func (p *pass) waitCondition(d decide.Decision) {
	conds := &p.status().Conditions
	gen := p.obj.GetGeneration()
	switch d.Reason {
	case decide.ReasonPlanAwaitingApproval:
		planned, ok := p.obj.(infrav1.Planned)
		if !ok || *planned.PlanPreview() == nil {
			return
		}
		plan := *planned.PlanPreview()
		if c := conditions.Get(*conds, conditions.ApplyJobSucceeded); c != nil && c.Reason == ReasonPlanChanged && strings.Contains(c.Message, plan.PlanHash) {
			return // still the plan the changed apply met; keep saying so
		}
		conditions.Set(conds, conditions.ApplyJobSucceeded, metav1.ConditionUnknown, ReasonPlanAwaitingApproval, approveMessage(p.obj, plan), gen, p.now)
	case decide.ReasonDestructivePlanBlocked:
		if c := conditions.Get(*conds, conditions.ApplyJobSucceeded); c != nil && c.Reason == ReasonDestructivePlanBlocked {
			return
		}
		conditions.Set(conds, conditions.ApplyJobSucceeded, metav1.ConditionFalse, ReasonDestructivePlanBlocked,
			"the newest apply of these inputs stopped before a destructive plan; approve it with the annotation "+jobs.AnnotationApproveDestructivePlan, gen, p.now)
	default:
		return
	}
	conditions.SetReady(conds, gen, p.now)
}

func approveMessage(obj client.Object, plan *infrav1.PlanPreview) string {
	return fmt.Sprintf("plan %s (%d to add, %d to change, %d to destroy) waits for approval: "+
		"POST a PlanApproval with this hash to plans/%s/approval of runs.captf.io/v1alpha1 in namespace %s, or annotate the object %s=%s",
		plan.PlanHash, plan.Add, plan.Change, plan.Destroy, plan.Job, obj.GetNamespace(), jobs.AnnotationApprovePlan, plan.PlanHash)
}

// driftCondition keeps DriftDetected True as DriftPending while a found drift waits for its
// remediation, e.g. at the remediation cap. It runs only while no Job is active, so a
// remediation that ran and failed goes back to pending.
func (p *pass) driftCondition(in decide.Input) {
	if in.Drift.Action != infrav1.DriftActionRemediate || !decide.DriftFound(in.Jobs) {
		return
	}
	msg := "drift waits for remediation"
	if !jobs.RemediationAllowed(in.Jobs, in.LastDriftCheck, in.Limits) {
		msg = fmt.Sprintf("remediation stopped after %d failed applies; the next successful drift check resets the count",
			jobs.RemediationFailures(in.Jobs, in.LastDriftCheck))
	}
	conditions.Set(&p.status().Conditions, conditions.DriftDetected, metav1.ConditionTrue, ReasonDriftPending, msg, p.obj.GetGeneration(), p.now)
}

// recordPlan writes a plan Job's plan, or the new plan an approved apply met, into status.plan.
func (p *pass) recordPlan(job *batchv1.Job, plan *jobs.PlanSummary, finished time.Time) *infrav1.PlanPreview {
	planned, ok := p.obj.(infrav1.Planned)
	if !ok || plan == nil || plan.Hash == "" {
		return nil
	}
	preview := &infrav1.PlanPreview{
		InputsHash: job.Annotations[jobs.AnnotationInputsHash], Job: job.Name, PlanHash: plan.Hash,
		Add: int32(plan.Add), Change: int32(plan.Change), Destroy: int32(plan.Destroy),
		Truncated: plan.Truncated, CreatedAt: &metav1.Time{Time: finished},
	}
	for _, r := range plan.Resources {
		preview.Resources = append(preview.Resources, fmt.Sprintf("%s (%s)", r.Address, strings.Join(r.Actions, ", ")))
	}
	*planned.PlanPreview() = preview
	return preview
}

// blockedMessage lists what a blocked apply would have deleted or replaced.
func blockedMessage(job *batchv1.Job, plan *jobs.PlanSummary) string {
	msg := "Job " + job.Name + ": stopped before a destructive plan"
	if plan != nil {
		var listed []string
		for _, r := range plan.Resources {
			action := "delete"
			if len(r.Actions) > 1 {
				action = "replace"
			}
			if strings.Contains(strings.Join(r.Actions, ","), "delete") {
				listed = append(listed, r.Address+" ("+action+")")
			}
		}
		if len(listed) > 0 {
			msg += ": " + strings.Join(listed, ", ")
		}
	}
	return msg + "; approve with the annotation " + jobs.AnnotationApproveDestructivePlan + "=" + job.Annotations[jobs.AnnotationInputsHash]
}

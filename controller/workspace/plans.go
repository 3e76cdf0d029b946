package workspace

import (
	"context"
	"crypto/rand"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/jobs"
)

// planKeyBytes is the size of the key behind the plan hash.
const planKeyBytes = 32

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
	live := p.r.KindInfo.New()
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
	logf.FromContext(ctx).Info("recorded an apply Job that disappeared while it ran; an apply is due", "job", active.Name)
	setInterruptedApply(p.status(), p.stamp(), active.Name)
	p.event(nil, corev1.EventTypeWarning, EventJobInterrupted, "%s", InterruptedApplyMessage(active.Name))
	return nil
}

package workspace

import (
	"context"
	"crypto/rand"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/jobs"
)

// planKeyBytes is the size of the key behind the plan hash.
const planKeyBytes = 32

// planKeyDataKey is the one data key of the plan-key Secret, the file the runner reads.
const planKeyDataKey = "key"

// ensurePlanKey creates the object's plan-key Secret the first time a plan needs it; it is
// never rotated, so a plan hash stays valid for the object's life. A Secret of that name that
// the controller did not make for this object is never used: whoever chose its key could test
// guesses of values against the plan hashes in status. problem then says why, and what to do.
func (p *pass) ensurePlanKey(ctx context.Context) (name, problem string, err error) {
	name = jobs.PlanKeySecretName(p.r.Kind, p.obj.GetName())
	key := client.ObjectKey{Namespace: p.obj.GetNamespace(), Name: name}
	var existing corev1.Secret
	err = p.r.APIReader.Get(ctx, key, &existing)
	if apierrors.IsNotFound(err) {
		created, createErr := p.createPlanKey(ctx, name)
		if created || createErr != nil {
			return name, "", createErr
		}
		// Someone made one since the read: it is judged like any other.
		err = p.r.APIReader.Get(ctx, key, &existing)
	}
	if err != nil {
		return "", "", fmt.Errorf("reading the plan key: %w", err)
	}
	if why := planKeyProblem(&existing, p.obj.GetUID(), jobs.OwnerLabels(p.r.Kind, p.obj.GetName())); why != "" {
		return name, fmt.Sprintf("the Secret %s is not the plan key captf made for this object: %s; delete it, and the controller makes a new one", name, why), nil
	}
	return name, "", nil
}

// createPlanKey creates the plan-key Secret with a fresh random key; created is false when a
// Secret of the name already exists.
func (p *pass) createPlanKey(ctx context.Context, name string) (created bool, err error) {
	key := make([]byte, planKeyBytes)
	if _, err := rand.Read(key); err != nil {
		return false, fmt.Errorf("generating the plan key: %w", err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: p.obj.GetNamespace(), Labels: p.ownerLabels(),
			OwnerReferences: []metav1.OwnerReference{p.ownerRef(false)},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{planKeyDataKey: key},
	}
	err = p.r.Client.Create(ctx, secret)
	switch {
	case apierrors.IsAlreadyExists(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("creating the plan key: %w", err)
	}
	return true, nil
}

// planKeyProblem says why secret is not a plan key the controller made for the object with uid,
// or "" when it is: an owner reference to that object, the owner labels given (not the
// cluster-name label, which an object may get after its key was made), type Opaque, and one data
// key holding planKeyBytes bytes.
func planKeyProblem(secret *corev1.Secret, uid types.UID, labels map[string]string) string {
	if !slices.ContainsFunc(secret.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == uid }) {
		return "it has no owner reference to this object (UID " + string(uid) + ")"
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if v, ok := secret.Labels[k]; !ok || v != labels[k] {
			return fmt.Sprintf("it lacks the label %s=%s", k, labels[k])
		}
	}
	if secret.Type != corev1.SecretTypeOpaque {
		return fmt.Sprintf("its type is %q, not %q", secret.Type, corev1.SecretTypeOpaque)
	}
	if len(secret.Data) != 1 || len(secret.Data[planKeyDataKey]) != planKeyBytes {
		return fmt.Sprintf("its data is not one key %q of %d bytes", planKeyDataKey, planKeyBytes)
	}
	return ""
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

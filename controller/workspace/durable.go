package workspace

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/inputs"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/runkey"
)

// The durable inputs Secret decides what every later destroy, refresh, drift and machine run
// executes: its files, its image and pinned digest, and the identity an apply ran with. Anyone
// who may update Secrets in the namespace could rewrite it, so the controller signs those facts
// whenever it writes them, and runs nothing from a Secret whose signature does not verify.

// durableFacts lists what a durable inputs Secret's signature covers: the Secret's name and
// namespace, the UID of the object it belongs to, its two files, and its image, digest and
// identity annotations.
func durableFacts(secret *corev1.Secret, owner metav1.Object) []string {
	return []string{"durable-inputs", secret.Namespace, secret.Name, string(owner.GetUID()),
		string(secret.Data[inputs.MainFile]), string(secret.Data[inputs.VarsFile]),
		secret.Annotations[jobs.AnnotationImage], secret.Annotations[jobs.AnnotationImageDigest], secret.Annotations[AnnotationIdentity]}
}

// signDurable signs secret's facts for owner, in place.
func (p *pass) signDurable(secret *corev1.Secret) {
	if p.r.RunKey == nil {
		return
	}
	metav1.SetMetaDataAnnotation(&secret.ObjectMeta, runkey.AnnotationSignature, p.r.RunKey.Sign(durableFacts(secret, p.obj)...))
}

// durableProblem says why the durable inputs Secret cannot be trusted, or "" when it can (or
// does not exist): it must belong to the object and carry the controller's signature of its
// facts (inputs written before the run key existed were signed when it was made).
func (p *pass) durableProblem(secret *corev1.Secret) string {
	if p.r.RunKey == nil || secret == nil || secret.Name == "" {
		return ""
	}
	if !ownedByRef(secret, p.obj) {
		return fmt.Sprintf("the durable inputs Secret %s is not owned by this %s", secret.Name, p.r.Kind)
	}
	if !p.r.RunKey.Verify(secret.Annotations[runkey.AnnotationSignature], durableFacts(secret, p.obj)...) {
		return fmt.Sprintf("the durable inputs Secret %s was changed by someone other than the controller: its signature does not verify", secret.Name)
	}
	return ""
}

// durableTrusted checks the durable inputs before a Job starts from them. ok is false when they
// were tampered with: no Job of any op starts, the op's condition and an event say so, until
// someone deletes the Secret.
func (p *pass) durableTrusted(ctx context.Context, op jobs.Op) (ok bool, err error) {
	durable := p.durable
	if !p.durableRead {
		if durable, err = p.readDurable(ctx); err != nil {
			return false, err
		}
	}
	problem := p.durableProblem(durable)
	if problem == "" {
		return true, nil
	}
	problem += "; nothing runs until it is deleted (a cluster or pool writes it again at its next apply)"
	if c := conditions.Get(p.status().Conditions, conditionFor(op)); c == nil || c.Reason != conditions.ReasonDurableInputsTampered {
		logf.FromContext(ctx).Info("refusing to run from tampered durable inputs", "secret", durable.Name, "op", op)
		p.event(nil, corev1.EventTypeWarning, EventDurableInputsTampered, "%s", problem)
	}
	setOpCondition(p.status(), p.stamp(), op, metav1.ConditionFalse, conditions.ReasonDurableInputsTampered, problem)
	return false, nil
}

// ownedByRef reports whether o has an owner reference to obj, controller or not.
func ownedByRef(o metav1.Object, obj metav1.Object) bool {
	for _, ref := range o.GetOwnerReferences() {
		if ref.UID == obj.GetUID() && ref.Name == obj.GetName() {
			return true
		}
	}
	return false
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

package workspace

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

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

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

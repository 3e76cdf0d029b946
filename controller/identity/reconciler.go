// Package identity reconciles TerraformClusterIdentity: its status says whether the Secret it
// lends exists. Lending itself (the allowed namespaces, the copies in them) happens in the
// passes of the objects that use the identity, which check it live.
package identity

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/workspace"
)

// SecretRecheck is how often an identity's Secret is looked at again: Secrets are not watched.
const SecretRecheck = 5 * time.Minute

// Event reasons of an identity.
const (
	EventSecretFound    = "IdentitySecretFound"
	EventSecretNotFound = "IdentitySecretNotFound"
)

// Events describes the event reasons of an identity, for docs/metrics-events.md.
var Events = []workspace.EventDoc{
	{Reason: EventSecretFound, Type: "Normal", Meaning: "The identity's Secret exists (again): objects it allows may run."},
	{Reason: EventSecretNotFound, Type: "Warning", Meaning: "The identity's Secret does not exist: objects using the identity start no run."},
}

// Reconciler writes an identity's Ready condition.
type Reconciler struct {
	Client client.Client
	// APIReader reads the identity's Secret live.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
}

// Reconcile reads the identity's Secret and writes Ready: True/SecretFound or
// False/SecretNotFound, with an event when it changes.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var identity infrav1.TerraformClusterIdentity
	if err := r.Client.Get(ctx, req.NamespacedName, &identity); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ref := identity.Spec.SecretRef
	var secret corev1.Secret
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &secret)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("reading Secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	before := identity.DeepCopy()
	wasReady := apimeta.IsStatusConditionTrue(identity.Status.Conditions, conditions.Ready)
	found := err == nil
	cond := metav1.Condition{Type: conditions.Ready, Status: metav1.ConditionTrue, Reason: conditions.ReasonSecretFound,
		Message: fmt.Sprintf("Secret %s/%s exists", ref.Namespace, ref.Name), ObservedGeneration: identity.Generation, LastTransitionTime: metav1.NewTime(r.Clock.Now())}
	if !found {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, conditions.ReasonSecretNotFound, fmt.Sprintf("Secret %s/%s does not exist", ref.Namespace, ref.Name)
	}
	conditions.Set(&identity.Status.Conditions, cond)
	if err := r.Client.Status().Patch(ctx, &identity, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		return ctrl.Result{}, fmt.Errorf("patching the status of %s: %w", identity.Name, err)
	}
	switch {
	case found && !wasReady && r.Recorder != nil:
		r.Recorder.Eventf(&identity, nil, corev1.EventTypeNormal, EventSecretFound, EventSecretFound, "Secret %s/%s exists", ref.Namespace, ref.Name)
	case !found && (wasReady || len(before.Status.Conditions) == 0) && r.Recorder != nil:
		r.Recorder.Eventf(&identity, nil, corev1.EventTypeWarning, EventSecretNotFound, EventSecretNotFound, "Secret %s/%s does not exist: objects using this identity start no run", ref.Namespace, ref.Name)
	}
	return ctrl.Result{RequeueAfter: SecretRecheck}, nil
}

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("terraformclusteridentity").For(&infrav1.TerraformClusterIdentity{}).Complete(r)
}

// Package identity reconciles TerraformClusterIdentity: its status says whether the Secret it
// lends exists in the controller's namespace. Lending itself (the allowed namespaces, the copies
// in them) happens in the passes of the objects that use the identity, which check it live.
package identity

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	EventSecretFound                    = "IdentitySecretFound"
	EventSecretNotFound                 = "IdentitySecretNotFound"
	EventSecretNotInControllerNamespace = "IdentitySecretNotInControllerNamespace"
)

// Events describes the event reasons of an identity, for docs/metrics-events.md.
var Events = []workspace.EventDoc{
	{Reason: EventSecretFound, Type: "Normal", Meaning: "The identity's Secret exists (again): objects it allows may run."},
	{Reason: EventSecretNotFound, Type: "Warning", Meaning: "The identity's Secret does not exist: objects using the identity start no run."},
	{Reason: EventSecretNotInControllerNamespace, Type: "Warning", Meaning: "The identity names a Secret outside the controller's namespace, which is never read or lent: objects using the identity start no run."},
}

// Reconciler writes an identity's Ready condition.
type Reconciler struct {
	Client client.Client
	// APIReader reads the identity's Secret live.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// Namespace is the controller's namespace, the only one whose Secrets an identity lends;
	// "" lends none.
	Namespace string
}

// Reconcile looks at the identity's Secret and writes Ready: True/SecretFound, or False with
// SecretNotFound or SecretNotInControllerNamespace, with an event when it changes.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var identity infrav1.TerraformClusterIdentity
	if err := r.Client.Get(ctx, req.NamespacedName, &identity); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	cond, err := r.secretCondition(ctx, &identity)
	if err != nil {
		return ctrl.Result{}, err
	}
	before := identity.DeepCopy()
	prev := conditions.Get(before.Status.Conditions, conditions.Ready)
	conditions.Set(&identity.Status.Conditions, cond)
	if err := r.Client.Status().Patch(ctx, &identity, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		return ctrl.Result{}, fmt.Errorf("patching the status of %s: %w", identity.Name, err)
	}
	r.event(&identity, prev, cond)
	return ctrl.Result{RequeueAfter: SecretRecheck}, nil
}

// secretCondition is the identity's Ready condition. A Secret outside the controller's
// namespace is not even read: whether it exists is no business of whoever wrote the identity.
func (r *Reconciler) secretCondition(ctx context.Context, identity *infrav1.TerraformClusterIdentity) (metav1.Condition, error) {
	ref := identity.Spec.SecretRef
	cond := metav1.Condition{Type: conditions.Ready, Status: metav1.ConditionFalse, ObservedGeneration: identity.Generation, LastTransitionTime: metav1.NewTime(r.Clock.Now())}
	if ref.Namespace != r.Namespace {
		cond.Reason, cond.Message = conditions.ReasonSecretNotInControllerNamespace, workspace.SecretNamespaceProblem(identity.Name, ref.Namespace, r.Namespace)
		return cond, nil
	}
	var secret corev1.Secret
	switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &secret); {
	case apierrors.IsNotFound(err):
		cond.Reason, cond.Message = conditions.ReasonSecretNotFound, fmt.Sprintf("Secret %s/%s does not exist", ref.Namespace, ref.Name)
	case err != nil:
		return cond, fmt.Errorf("reading Secret %s/%s: %w", ref.Namespace, ref.Name, err)
	default:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, conditions.ReasonSecretFound, fmt.Sprintf("Secret %s/%s exists", ref.Namespace, ref.Name)
	}
	return cond, nil
}

// event records a change of Ready: once when it becomes True, once for each reason it becomes
// False with.
func (r *Reconciler) event(identity *infrav1.TerraformClusterIdentity, prev *metav1.Condition, now metav1.Condition) {
	if r.Recorder == nil || (prev != nil && prev.Status == now.Status && prev.Reason == now.Reason) {
		return
	}
	switch now.Reason {
	case conditions.ReasonSecretFound:
		r.Recorder.Eventf(identity, nil, corev1.EventTypeNormal, EventSecretFound, EventSecretFound, "%s", now.Message)
	case conditions.ReasonSecretNotFound:
		r.Recorder.Eventf(identity, nil, corev1.EventTypeWarning, EventSecretNotFound, EventSecretNotFound, "%s: objects using this identity start no run", now.Message)
	case conditions.ReasonSecretNotInControllerNamespace:
		r.Recorder.Eventf(identity, nil, corev1.EventTypeWarning, EventSecretNotInControllerNamespace, EventSecretNotInControllerNamespace, "%s; objects using this identity start no run", now.Message)
	}
}

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("terraformclusteridentity").For(&infrav1.TerraformClusterIdentity{}).Complete(r)
}

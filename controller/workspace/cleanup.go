package workspace

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/captf/captf/controller/lease"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/jobs"
)

var leaseRelease = lease.Release

// cleanup deletes what the object's runs left once nothing is left to destroy: the state, its
// parts and its lock, the durable inputs, the plan key and the run Lease. Jobs and their per-run Secrets
// go with the object through their owner references.
func (p *pass) cleanup(ctx context.Context) error {
	ns := p.obj.GetNamespace()
	suffix := p.stateSuffix()
	objects := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: state.SecretName(suffix)}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: state.LockLeaseName(suffix)}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: jobs.InputsSecretName(p.r.Kind, p.obj.GetName())}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: jobs.PlanKeySecretName(p.r.Kind, p.obj.GetName())}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: jobs.RunLeaseName(suffix)}},
	}
	objects = append(objects, p.statePartObjects()...)
	for _, o := range objects {
		if err := p.r.Client.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("cleaning up %s: %w", o.GetName(), err)
		}
	}
	p.r.states.forget(client.ObjectKeyFromObject(objects[0]))
	return nil
}

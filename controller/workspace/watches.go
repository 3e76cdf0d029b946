package workspace

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/jobs"
)

// The maps from the objects a reconciler watches besides its kind to the objects of its kind
// they wake.

// requestsFor lists the objects of this kind from the cache and returns those keep accepts (all
// when keep is nil). what names the watched object in the log of a failed list.
func (r *Reconciler) requestsFor(ctx context.Context, what client.Object, keep func(infrav1.Workspace) bool, opts ...client.ListOption) []reconcile.Request {
	list := r.KindInfo.NewList()
	if err := r.Client.List(ctx, list, opts...); err != nil {
		// A cache list fails only when the cache is broken; the objects' next passes read anew.
		logf.FromContext(ctx).Error(err, "mapping a watched object to the objects it wakes", "object", client.ObjectKeyFromObject(what))
		return nil
	}
	var out []reconcile.Request
	_ = meta.EachListItem(list, func(o runtime.Object) error {
		if obj, ok := o.(infrav1.Workspace); ok && (keep == nil || keep(obj)) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
		}
		return nil
	})
	return out
}

// secretOwners maps a managed Secret to the objects of this kind its owner labels name: a
// name label is the name itself, or a hash of a long name, which the index answers. A name
// label of a name that no object has wakes nothing: the pass finds no object.
func (r *Reconciler) secretOwners(ctx context.Context, secret client.Object) []reconcile.Request {
	labels := secret.GetLabels()
	value := labels[jobs.LabelOwnerName]
	if labels[jobs.LabelOwnerKind] != string(r.Kind) || value == "" {
		return nil
	}
	direct := reconcile.Request{NamespacedName: client.ObjectKey{Namespace: secret.GetNamespace(), Name: value}}
	hashed := r.requestsFor(ctx, secret, nil, client.InNamespace(secret.GetNamespace()), client.MatchingFields{ownerNameIndex: value})
	return append(hashed, direct)
}

// clusterMembers maps a Cluster to the objects of this kind with its cluster-name label.
func (r *Reconciler) clusterMembers(ctx context.Context, cluster client.Object) []reconcile.Request {
	return r.requestsFor(ctx, cluster, nil, client.InNamespace(cluster.GetNamespace()), client.MatchingLabels{jobs.LabelClusterName: jobs.LabelValue(cluster.GetName())})
}

// identityUsers maps a TerraformClusterIdentity to the objects of this kind whose identityRef
// names it.
func (r *Reconciler) identityUsers(ctx context.Context, identity client.Object) []reconcile.Request {
	return r.requestsFor(ctx, identity, func(obj infrav1.Workspace) bool {
		ref := obj.WorkspaceSpec().IdentityRef
		return ref != nil && ref.Name == identity.GetName()
	})
}

// infrastructureOf maps a Machine or MachinePool to the object of this kind its infrastructure
// reference names, if any.
func (r *Reconciler) infrastructureOf(owner client.Object, ref clusterv1.ContractVersionedObjectReference) []reconcile.Request {
	if ref.APIGroup != infrav1.GroupVersion.Group || ref.Kind != r.KindInfo.Kind || ref.Name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: owner.GetNamespace(), Name: ref.Name}}}
}

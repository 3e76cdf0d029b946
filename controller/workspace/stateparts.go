package workspace

import (
	"context"
	"fmt"
	"strconv"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crevent "sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/captf/captf/controller/jobspec"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/jobs"
)

// A state larger than one Secret is kept in part Secrets (jobs.SplitState). The runner may only
// get and update objects its Role names, and RBAC cannot limit a create to a name, so the
// controller creates the parts: empty, the number a run asks for on the lock Lease, in both
// slots, never more than jobs.MaxStateParts each.

// statePartsWanted is the number of parts per slot the lock Lease with these annotations asks
// for, bounded.
func statePartsWanted(annotations map[string]string) int {
	n, err := strconv.Atoi(annotations[jobs.AnnotationStatePartsWanted])
	if err != nil || n < 1 {
		return 0
	}
	return min(n, jobs.MaxStateParts)
}

// statePartsAsked passes the lock Lease events that ask for parts, so a run waiting for them
// wakes its object's pass and no other Lease change does.
var statePartsAsked = predicate.Funcs{
	CreateFunc: func(e crevent.CreateEvent) bool { return statePartsWanted(e.Object.GetAnnotations()) > 0 },
	UpdateFunc: func(e crevent.UpdateEvent) bool {
		return statePartsWanted(e.ObjectNew.GetAnnotations()) > statePartsWanted(e.ObjectOld.GetAnnotations())
	},
	DeleteFunc:  func(crevent.DeleteEvent) bool { return false },
	GenericFunc: func(crevent.GenericEvent) bool { return false },
}

// provideStateParts creates the part Secrets the lock Lease asks for that do not exist yet and,
// while the object has parts, for its own runner identity the Role and RoleBinding that let it
// get and update them by name. The parts have a Role of their own, made only once a state needs
// parts, so the objects whose state fits one Secret (nearly all) cost nothing more, and a runner
// Role is never updated: the controller may create Roles, not change them. Parts that exist
// without a Role, as after `clusterctl move` (which carries the parts, by their move label, and
// not the Roles), get it back before the next Job reads them.
func (p *pass) provideStateParts(ctx context.Context) error {
	ns, suffix := p.obj.GetNamespace(), p.stateSuffix()
	annotations, err := p.lockLeaseAnnotations(ctx, types.NamespacedName{Namespace: ns, Name: state.LockLeaseName(suffix)})
	if err != nil {
		return err
	}
	// Only a running Job waits for parts: an annotation left behind, or set by whoever may
	// update Leases, creates nothing while none runs.
	wanted := 0
	if jobs.ActiveJob(p.jobs) != nil {
		wanted = statePartsWanted(annotations)
	}
	if wanted == 0 && !p.hasStateParts(ctx) {
		return nil
	}
	var objects []wantedObject
	if p.obj.WorkspaceSpec().Jobs.ServiceAccountName == "" {
		runner, name := jobs.RunnerIdentityName(suffix), jobs.StatePartsRoleName(suffix)
		meta := func() metav1.ObjectMeta {
			return metav1.ObjectMeta{Name: name, Namespace: ns, Labels: p.ownerLabels(), OwnerReferences: []metav1.OwnerReference{p.ownerRef(false)}}
		}
		objects = append(objects,
			wantedObject{&rbacv1.Role{ObjectMeta: meta(), Rules: StatePartsRules(suffix)}, roleGVK},
			wantedObject{&rbacv1.RoleBinding{
				ObjectMeta: meta(),
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
				Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: runner, Namespace: ns}},
			}, roleBindingGVK})
	}
	var parts []*corev1.Secret
	for _, slot := range jobs.StatePartSlots {
		for i := range wanted {
			part := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: jobs.StatePartName(suffix, slot, i), Namespace: ns, Labels: p.statePartLabels()},
				Type:       corev1.SecretTypeOpaque,
			}
			parts = append(parts, part)
			objects = append(objects, wantedObject{part, secretGVK})
		}
	}
	if err := p.createMissing(ctx, objects); err != nil {
		return err
	}
	return p.replaceUnwritableParts(ctx, parts)
}

// replaceUnwritableParts replaces a part the run could not write: one made immutable, or of
// another type, by whoever may create Secrets, before the controller made it. The run asks for
// parts only once its apply is done, so such a part would lose the state of what it created.
// A part the runner writes is never either, so nothing of a state is lost.
func (p *pass) replaceUnwritableParts(ctx context.Context, parts []*corev1.Secret) error {
	for _, want := range parts {
		var got corev1.Secret
		if err := p.r.APIReader.Get(ctx, client.ObjectKeyFromObject(want), &got); err != nil {
			return client.IgnoreNotFound(err)
		}
		if !ptr.Deref(got.Immutable, false) && got.Type == corev1.SecretTypeOpaque {
			continue
		}
		if err := p.r.Client.Delete(ctx, &got, client.Preconditions{UID: &got.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("replacing the unwritable state part %s: %w", got.Name, err)
		}
		fresh := want.DeepCopy()
		if err := p.r.Client.Create(ctx, fresh); err != nil {
			return fmt.Errorf("replacing the unwritable state part %s: %w", got.Name, err)
		}
		logf.FromContext(ctx).Info("replaced a state part the run could not write", "secret", got.Name, "immutable", ptr.Deref(got.Immutable, false), "type", got.Type)
	}
	return nil
}

// StatePartsRules are the rules of the Role that lets an object's runner get and update its
// state parts, by name, whether or not they exist yet: only the controller creates them.
func StatePartsRules(stateSuffix string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "update"}, ResourceNames: jobs.StatePartNames(stateSuffix)},
	}
}

// hasStateParts reports whether the first part of either slot exists, as the metadata cache
// knows it, or live without a cache.
func (p *pass) hasStateParts(ctx context.Context) bool {
	for _, slot := range jobs.StatePartSlots {
		key := types.NamespacedName{Namespace: p.obj.GetNamespace(), Name: jobs.StatePartName(p.stateSuffix(), slot, 0)}
		if p.r.Metadata == nil {
			if err := p.r.APIReader.Get(ctx, key, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}}); err == nil {
				return true
			}
			continue
		}
		if _, found, err := cachedMetadata(ctx, p.r.Metadata, secretGVK, key); err == nil && found {
			return true
		}
	}
	return false
}

// lockLeaseAnnotations reads the lock Lease's annotations from the metadata cache, or live
// without one.
func (p *pass) lockLeaseAnnotations(ctx context.Context, key types.NamespacedName) (map[string]string, error) {
	if p.r.Metadata != nil {
		m, found, err := cachedMetadata(ctx, p.r.Metadata, leaseGVK, key)
		if err != nil || !found {
			return nil, err
		}
		return m.Annotations, nil
	}
	var lease coordinationv1.Lease
	if err := p.r.APIReader.Get(ctx, key, &lease); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return lease.Annotations, nil
}

// statePartLabels are a part's labels: the state Secret's owner, cluster and move labels, so
// the metadata cache holds it and `clusterctl move` takes it along, and the part label; not the
// backend's own labels, which would make it a workspace to OpenTofu.
func (p *pass) statePartLabels() map[string]string {
	labels := jobspec.BackendLabelMap(p.r.Kind, p.obj.GetName(), p.obj.GetLabels()[jobs.LabelClusterName])
	labels[jobs.LabelStatePart] = "true"
	return labels
}

// statePartObjects are every part Secret a state may have. Cleanup deletes them all, not only
// those the metadata cache knows: the run's identity may update a part's labels, and a part
// out of the cache would outlive the object with state in it.
func (p *pass) statePartObjects() []client.Object {
	ns := p.obj.GetNamespace()
	var out []client.Object
	for _, name := range jobs.StatePartNames(p.stateSuffix()) {
		out = append(out, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	}
	return out
}

package cache

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/jobs"
)

// SlimCluster is the cache transform of Cluster API Clusters. It keeps what the reconcilers read
// of a Cluster and drops the rest (labels, annotations, owner references, the control plane
// reference, the topology but its version, conditions and the other status): its identity,
// spec.paused, spec.infrastructureRef, spec.controlPlaneEndpoint, spec.clusterNetwork,
// spec.topology.version and status.initialization. Nothing writes a cached Cluster back: the
// controller never writes Clusters. The kept fields are copied into a new Cluster, so a field a
// newer Cluster API adds is dropped until code reads it and it is added here. SlimCluster gives
// the same Cluster for a Cluster it already slimmed.
func SlimCluster(in any) (any, error) {
	c, ok := in.(*clusterv1.Cluster)
	if !ok {
		return in, nil
	}
	return &clusterv1.Cluster{
		TypeMeta: c.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name:            c.Name,
			Namespace:       c.Namespace,
			UID:             c.UID,
			ResourceVersion: c.ResourceVersion,
		},
		Spec: clusterv1.ClusterSpec{
			Paused: c.Spec.Paused,
			ClusterNetwork: clusterv1.ClusterNetwork{
				APIServerPort: c.Spec.ClusterNetwork.APIServerPort,
				Services:      clusterv1.NetworkRanges{CIDRBlocks: c.Spec.ClusterNetwork.Services.CIDRBlocks},
				Pods:          clusterv1.NetworkRanges{CIDRBlocks: c.Spec.ClusterNetwork.Pods.CIDRBlocks},
				ServiceDomain: c.Spec.ClusterNetwork.ServiceDomain,
			},
			ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: c.Spec.ControlPlaneEndpoint.Host, Port: c.Spec.ControlPlaneEndpoint.Port},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: c.Spec.InfrastructureRef.APIGroup, Kind: c.Spec.InfrastructureRef.Kind, Name: c.Spec.InfrastructureRef.Name,
			},
			Topology: clusterv1.Topology{Version: c.Spec.Topology.Version},
		},
		Status: clusterv1.ClusterStatus{Initialization: clusterv1.ClusterInitializationStatus{
			InfrastructureProvisioned: c.Status.Initialization.InfrastructureProvisioned,
			ControlPlaneInitialized:   c.Status.Initialization.ControlPlaneInitialized,
		}},
	}, nil
}

// SlimMetadata is the cache transform of the kinds whose metadata alone is cached (Secrets,
// Leases and the runner identities' ServiceAccounts, Roles and RoleBindings). Reads of that
// cache use an object's existence, its resourceVersion (is the state Secret the one the memo
// read), its annotations (the durable inputs' records, the state lock's details) and its labels
// (the owner a Secret's event wakes); the rest of the metadata (UID, owner references,
// finalizers, generation, times) is dropped. Nothing writes cached metadata back. Like
// StripUnread, SlimMetadata changes the object it is given, which the informer decoded for the
// cache alone, so that no second copy is made.
func SlimMetadata(in any) (any, error) {
	m, ok := in.(*metav1.PartialObjectMetadata)
	if !ok {
		return in, nil
	}
	m.ObjectMeta = metav1.ObjectMeta{
		Name:            m.Name,
		Namespace:       m.Namespace,
		ResourceVersion: m.ResourceVersion,
		Labels:          m.Labels,
		Annotations:     m.Annotations,
	}
	return m, nil
}

// StripUnread is the cache transform of every kind without one of its own. It drops two parts
// of the metadata that nothing in the controller reads and that can outweigh the rest of an
// object: its managed fields, and kubectl's last-applied-configuration annotation (a copy of
// the object as last applied; for a Secret, its data too). The controller's writes of cached
// objects are patches computed against a copy of them, and the objects it updates whole
// (Secrets, run Leases) it reads live, so what is dropped here stays in the API. StripUnread
// changes the object it is given, which the informer decoded for the cache alone.
func StripUnread(in any) (any, error) {
	obj, err := meta.Accessor(in)
	if err != nil {
		return in, nil
	}
	if obj.GetManagedFields() != nil {
		obj.SetManagedFields(nil)
	}
	if annotations := obj.GetAnnotations(); annotations != nil {
		if _, ok := annotations[corev1.LastAppliedConfigAnnotation]; ok {
			delete(annotations, corev1.LastAppliedConfigAnnotation)
			if len(annotations) == 0 {
				obj.SetAnnotations(nil)
			}
		}
	}
	return in, nil
}

// Intern is the last cache transform of every kind: the strings that objects repeat — the
// namespace, label and annotation keys, finalizers, the API versions and kinds of owner
// references and, on captf's kinds, the type, status, reason and message of each condition —
// become one shared copy each (Go's unique package), instead of one per object the informer
// decoded. Most condition messages are fixed sentences every converged object holds ("neither
// the object nor its Cluster is paused"); one that names the object costs its shared copy's
// entry, about 35 bytes more than the string. Values that are mostly one object's own (names,
// UIDs, label and annotation values) are left alone: a shared copy of a string no other object
// holds costs more than the string. The conditions get a slice of their exact length. The
// object's value does not change.
func Intern(in any) (any, error) {
	obj, err := meta.Accessor(in)
	if err != nil {
		return in, nil
	}
	if o, ok := in.(runtime.Object); ok {
		// Set through the TypeMeta itself: its setters build the API version anew.
		if t, ok := o.GetObjectKind().(*metav1.TypeMeta); ok {
			t.APIVersion, t.Kind = intern(t.APIVersion), intern(t.Kind)
		}
	}
	obj.SetNamespace(intern(obj.GetNamespace()))
	obj.SetLabels(internKeys(obj.GetLabels()))
	obj.SetAnnotations(internKeys(obj.GetAnnotations()))
	finalizers := obj.GetFinalizers()
	for i := range finalizers {
		finalizers[i] = intern(finalizers[i])
	}
	refs := obj.GetOwnerReferences()
	for i := range refs {
		refs[i].APIVersion, refs[i].Kind = intern(refs[i].APIVersion), intern(refs[i].Kind)
	}
	if w, ok := in.(infrav1.Workspace); ok {
		status := w.WorkspaceStatus()
		if len(status.Conditions) > 0 {
			conditions := slices.Clip(slices.Clone(status.Conditions))
			for i := range conditions {
				c := &conditions[i]
				c.Type, c.Reason, c.Message = intern(c.Type), intern(c.Reason), intern(c.Message)
				c.Status = metav1.ConditionStatus(intern(string(c.Status)))
			}
			status.Conditions = conditions
		}
	}
	return in, nil
}

var intern = jobs.Intern

// interned is obj after Intern, which never fails on an object.
func interned(obj client.Object) client.Object {
	_, _ = Intern(obj)
	return obj
}

// internKeys returns m with its keys interned; its values are m's.
func internKeys(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[intern(k)] = v
	}
	return out
}

// Chain is the transform that applies each of fns in turn.
func Chain(fns ...toolscache.TransformFunc) toolscache.TransformFunc {
	return func(in any) (any, error) {
		var err error
		for _, fn := range fns {
			if in, err = fn(in); err != nil {
				return nil, err
			}
		}
		return in, nil
	}
}

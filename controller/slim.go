package controller

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
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

// StripUnread is the cache transform of every kind without one of its own. It drops two parts
// of the metadata that nothing in the controller reads and that can outweigh the rest of an
// object: its managed fields, and kubectl's last-applied-configuration annotation (a copy of
// the object as last applied; for a Secret, its data too). The controller never writes a cached
// object whole: its writes are patches computed against a copy of the cached object, so what
// is dropped here stays in the API. StripUnread changes the object it is given, which the
// informer decoded for the cache alone.
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

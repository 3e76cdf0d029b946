package main

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The sample's names (artifacts/samples/cluster.yaml).
const (
	sampleNamespace    = "default"
	sampleCluster      = "demo"
	sampleControlPlane = "demo-cp-0"
	sampleMachines     = 3
)

// standIn plays what the sample modules cannot boot, so that Cluster API's kubeadm bootstrap
// provider (CABPK) gives the sample's workers real join data: the workload cluster (the local
// kube-apiserver) and, with capitest.RunLocalNodes, the machines' kubelets.
type standIn struct {
	c client.Client
	// kubeconfig is the local admin kubeconfig.
	kubeconfig []byte
	// polls counts provisioned's calls, a second apart: nudges go every 8.
	polls int
}

// workloadKubeconfig writes <cluster>-kubeconfig with the local admin kubeconfig, as a control
// plane provider would write the workload cluster's, owned by the Cluster. Written before CABPK
// makes the cluster's CA: Cluster API writes one for stand-alone control planes from that CA
// when none exists, for an endpoint nothing serves here, and never replaces one that does.
func (s *standIn) workloadKubeconfig(ctx context.Context) error {
	var cluster clusterv1.Cluster
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: sampleNamespace, Name: sampleCluster}, &cluster); err != nil {
		return err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: sampleCluster + "-kubeconfig", Namespace: sampleNamespace,
			Labels: map[string]string{clusterv1.ClusterNameLabel: sampleCluster},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: cluster.Name, UID: cluster.UID,
			}},
		},
		Type: clusterv1.ClusterSecretType,
		Data: map[string][]byte{"value": s.kubeconfig},
	}
	if err := s.c.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("writing the workload kubeconfig: %w", err)
	}
	return nil
}

// provisioned reports whether every Machine of the sample has its provider ID and the bootstrap
// data of its KubeadmConfig, and nudges the Cluster until its control plane is initialized.
func (s *standIn) provisioned(ctx context.Context) (bool, error) {
	s.polls++
	var machines clusterv1.MachineList
	if err := s.c.List(ctx, &machines, client.InNamespace(sampleNamespace), client.MatchingLabels{clusterv1.ClusterNameLabel: sampleCluster}); err != nil {
		return false, err
	}
	done := 0
	for i := range machines.Items {
		m := &machines.Items[i]
		if m.Name == sampleControlPlane && m.Status.NodeRef.IsDefined() {
			if err := s.nudgeCluster(ctx); err != nil {
				return false, err
			}
		}
		ok, err := bootstrappedByKubeadm(ctx, s.c, m)
		if err != nil {
			return false, err
		}
		if ok && m.Spec.ProviderID != "" {
			done++
		}
	}
	return done == sampleMachines, nil
}

// nudgeCluster touches the Cluster now and then until its control plane is initialized: Cluster
// API marks a Cluster with stand-alone control plane machines initialized from their Nodes, but
// may not look again for minutes after the Node lands.
func (s *standIn) nudgeCluster(ctx context.Context) error {
	if s.polls%8 != 0 {
		return nil
	}
	var cluster clusterv1.Cluster
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: sampleNamespace, Name: sampleCluster}, &cluster); err != nil {
		return err
	}
	if meta.IsStatusConditionTrue(cluster.Status.Conditions, clusterv1.ClusterControlPlaneInitializedCondition) {
		return nil
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"localcluster.captf.io/nudge":"%d"}}}`, s.polls)
	return s.c.Patch(ctx, &cluster, client.RawPatch(types.MergePatchType, []byte(patch)))
}

// bootstrappedByKubeadm reports whether the Machine's bootstrap data Secret is the one its
// KubeadmConfig reports (read unstructured: captf's scheme does not hold CABPK's kinds).
func bootstrappedByKubeadm(ctx context.Context, c client.Client, m *clusterv1.Machine) (bool, error) {
	ref := m.Spec.Bootstrap.ConfigRef
	if ref.Kind != "KubeadmConfig" || m.Spec.Bootstrap.DataSecretName == nil {
		return false, nil
	}
	config := &unstructured.Unstructured{}
	config.SetAPIVersion(ref.APIGroup + "/v1beta2")
	config.SetKind(ref.Kind)
	if err := c.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: ref.Name}, config); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	name, _, err := unstructured.NestedString(config.Object, "status", "dataSecretName")
	return err == nil && name != "" && name == *m.Spec.Bootstrap.DataSecretName, err
}

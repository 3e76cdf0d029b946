// Package capitest plays the part of Cluster API's core controllers where they do not run (the
// tests of the engine; test/capi and `make run` run the real ones): it makes the owners Cluster
// API would make for an infrastructure object, and the owner references and status it would
// write. The CRDs of Cluster, Machine and MachinePool must be installed (testenv does).
package capitest

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
)

// BootstrapData is the bootstrap data of the Machines and MachinePools made here.
const BootstrapData = "#cloud-config\n"

// DefaultCluster names the Cluster of a machine or pool without a cluster-name label.
const DefaultCluster = "cluster"

// Own gives obj, before it is created, the owner Cluster API would give it, making what is
// missing: a TerraformCluster gets a Cluster whose spec.infrastructureRef names it; a
// TerraformMachine a Machine, a TerraformMachinePool a MachinePool, each with a bootstrap data
// Secret, in a Cluster whose infrastructure is provisioned. A machine's or pool's cluster
// without a TerraformCluster gets an externally managed one, whose exports are {}. obj gets the
// cluster-name label and an owner reference.
func Own(ctx context.Context, c client.Client, obj client.Object) error {
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	clusterName := labels[clusterv1.ClusterNameLabel]
	kind := kindOf(obj)
	switch kind {
	case infrav1.ClusterKind.Kind:
		if clusterName == "" {
			clusterName = obj.GetName()
		}
		labels[clusterv1.ClusterNameLabel] = clusterName
		obj.SetLabels(labels)
		cluster, err := ensureCluster(ctx, c, obj.GetNamespace(), clusterName, obj.GetName(), false)
		if err != nil {
			return err
		}
		addOwner(obj, cluster, "Cluster")
		return nil
	}
	if clusterName == "" {
		clusterName = DefaultCluster
	}
	labels[clusterv1.ClusterNameLabel] = clusterName
	obj.SetLabels(labels)
	if _, err := ensureCluster(ctx, c, obj.GetNamespace(), clusterName, clusterName, true); err != nil {
		return err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: obj.GetName() + "-bootstrap", Namespace: obj.GetNamespace(), Labels: map[string]string{clusterv1.ClusterNameLabel: clusterName}},
		Type:       clusterv1.ClusterSecretType,
		Data:       map[string][]byte{"value": []byte(BootstrapData), "format": []byte("cloud-config")},
	}
	if err := c.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the bootstrap data Secret: %w", err)
	}
	infraRef := clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Name: obj.GetName()}
	switch kind {
	case infrav1.MachineKind.Kind:
		infraRef.Kind = infrav1.MachineKind.Kind
		machine := &clusterv1.Machine{
			ObjectMeta: metav1.ObjectMeta{Name: obj.GetName(), Namespace: obj.GetNamespace(), Labels: map[string]string{clusterv1.ClusterNameLabel: clusterName}},
			Spec: clusterv1.MachineSpec{
				ClusterName: clusterName, InfrastructureRef: infraRef,
				Bootstrap: clusterv1.Bootstrap{DataSecretName: ptr.To(secret.Name)},
			},
		}
		if err := create(ctx, c, machine); err != nil {
			return err
		}
		addOwner(obj, machine, "Machine")
	case infrav1.MachinePoolKind.Kind:
		infraRef.Kind = infrav1.MachinePoolKind.Kind
		pool := &clusterv1.MachinePool{
			ObjectMeta: metav1.ObjectMeta{Name: obj.GetName(), Namespace: obj.GetNamespace(), Labels: map[string]string{clusterv1.ClusterNameLabel: clusterName}},
			Spec: clusterv1.MachinePoolSpec{
				ClusterName: clusterName, Replicas: ptr.To[int32](1),
				Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{
					ClusterName: clusterName, InfrastructureRef: infraRef,
					Bootstrap: clusterv1.Bootstrap{DataSecretName: ptr.To(secret.Name)},
				}},
			},
		}
		if err := create(ctx, c, pool); err != nil {
			return err
		}
		addOwner(obj, pool, "MachinePool")
	default:
		return fmt.Errorf("no Cluster API owner for %T", obj)
	}
	return nil
}

// kindOf is the captf kind of a typed or unstructured object.
func kindOf(obj client.Object) string {
	switch obj.(type) {
	case *infrav1.TerraformCluster:
		return infrav1.ClusterKind.Kind
	case *infrav1.TerraformMachine:
		return infrav1.MachineKind.Kind
	case *infrav1.TerraformMachinePool:
		return infrav1.MachinePoolKind.Kind
	}
	return obj.GetObjectKind().GroupVersionKind().Kind
}

// ensureCluster returns the Cluster of the name, made with its infrastructure reference naming
// the TerraformCluster infra when missing. With provisioned, its infrastructure is marked
// provisioned, and infra is made externally managed when it does not exist.
func ensureCluster(ctx context.Context, c client.Client, namespace, name, infra string, provisioned bool) (*clusterv1.Cluster, error) {
	cluster := &clusterv1.Cluster{}
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, cluster)
	switch {
	case apierrors.IsNotFound(err):
		cluster = &clusterv1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
			Spec: clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: infrav1.GroupVersion.Group, Kind: infrav1.ClusterKind.Kind, Name: infra,
			}},
		}
		if err := create(ctx, c, cluster); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, fmt.Errorf("reading Cluster %s: %w", name, err)
	}
	if !provisioned {
		return cluster, nil
	}
	var tc infrav1.TerraformCluster
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: infra}, &tc); apierrors.IsNotFound(err) {
		tc = infrav1.TerraformCluster{
			ObjectMeta: metav1.ObjectMeta{Name: infra, Namespace: namespace,
				Labels:      map[string]string{clusterv1.ClusterNameLabel: name},
				Annotations: map[string]string{clusterv1.ManagedByAnnotation: "capitest"}},
			Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Source: infrav1.SourceSpec{Image: "capitest/externally-managed:v1"}}},
		}
		if err := create(ctx, c, &tc); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, fmt.Errorf("reading TerraformCluster %s: %w", infra, err)
	}
	return cluster, MarkInfrastructureProvisioned(ctx, c, cluster)
}

// MarkInfrastructureProvisioned writes what Cluster API's Cluster controller writes once the
// cluster's infrastructure is provisioned.
func MarkInfrastructureProvisioned(ctx context.Context, c client.Client, cluster *clusterv1.Cluster) error {
	if p := cluster.Status.Initialization.InfrastructureProvisioned; p != nil && *p {
		return nil
	}
	patch := client.MergeFrom(cluster.DeepCopy())
	cluster.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
	if err := c.Status().Patch(ctx, cluster, patch); err != nil {
		return fmt.Errorf("marking the infrastructure of Cluster %s provisioned: %w", cluster.Name, err)
	}
	return nil
}

func create(ctx context.Context, c client.Client, obj client.Object) error {
	if err := c.Create(ctx, obj); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return c.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		}
		return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
	}
	return nil
}

// addOwner adds a Cluster API owner reference, as its controllers set them: not a controller.
func addOwner(obj, owner client.Object, kind string) {
	ref := metav1.OwnerReference{APIVersion: clusterv1.GroupVersion.String(), Kind: kind, Name: owner.GetName(), UID: owner.GetUID()}
	obj.SetOwnerReferences(append(obj.GetOwnerReferences(), ref))
}

package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/captf/captf/test/capitest"
	"github.com/captf/captf/test/system"
)

// The ClusterClass sample's names (artifacts/samples/clusterclass.yaml).
const (
	classNamespace = "demo-cc"
	classCluster   = "demo-cc"
	classWorkers   = 2
)

// clusterClassSample applies the ClusterClass sample and its Cluster and waits until the
// topology's workers are provisioned with their kubeadm data. The no-op module boots nothing,
// so a stand-in control plane provider (capitest.LocalControlPlane) and stand-in kubelets
// (capitest.RunLocalNodes) run for the sample's namespace until ctx ends.
func clusterClassSample(ctx context.Context, sys *system.System, c client.Client, kubeconfig []byte) error {
	env := sys.Env
	cabpk := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: system.KubeadmBootstrapNamespace, Name: system.KubeadmBootstrapSA}
	if err := capitest.InstallLocalControlPlane(ctx, env.Config, cabpk); err != nil {
		return fmt.Errorf("installing the stand-in control plane provider: %w", err)
	}
	go func() { _ = capitest.RunLocalControlPlanes(ctx, c, classNamespace, kubeconfig) }()
	go func() { _ = capitest.RunLocalNodes(ctx, c, classNamespace) }()

	class := filepath.Join(env.RepoRoot, "artifacts", "samples", "clusterclass.yaml")
	fmt.Printf("applying %s ...\n", class)
	if err := env.ApplyManifests(ctx, class); err != nil {
		return err
	}
	// Cluster API's Cluster webhook validates a topology against a reconciled ClusterClass.
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var cc clusterv1.ClusterClass
		err := c.Get(ctx, client.ObjectKey{Namespace: classNamespace, Name: classCluster}, &cc)
		return err == nil && cc.Status.ObservedGeneration == cc.Generation &&
			meta.IsStatusConditionTrue(cc.Status.Conditions, clusterv1.ClusterClassVariablesReadyCondition), client.IgnoreNotFound(err)
	}); err != nil {
		return fmt.Errorf("Cluster API did not reconcile the ClusterClass: %w", err)
	}
	cluster := filepath.Join(env.RepoRoot, "artifacts", "samples", "clusterclass-cluster.yaml")
	fmt.Printf("applying %s ...\n", cluster)
	if err := env.ApplyManifests(ctx, cluster); err != nil {
		return err
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		var machines clusterv1.MachineList
		if err := c.List(ctx, &machines, client.InNamespace(classNamespace), client.MatchingLabels{clusterv1.ClusterNameLabel: classCluster}); err != nil {
			return false, err
		}
		done := 0
		for i := range machines.Items {
			m := &machines.Items[i]
			ok, err := bootstrappedByKubeadm(ctx, c, m)
			if err != nil {
				return false, err
			}
			if ok && m.Spec.ProviderID != "" {
				done++
			}
		}
		return done == classWorkers, nil
	}); err != nil {
		return fmt.Errorf("the ClusterClass sample was not provisioned: %w\ncontroller log: %s", err, sys.Log("controller"))
	}
	return nil
}

package capi

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/hack/clusterctl/repo"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/test/capitest"
	"github.com/captf/captf/test/system"
	"github.com/captf/captf/test/testenv"
)

// ownedSecret is a Secret of Cluster API's type owned by the Cluster, as a bootstrap or control
// plane provider's Secrets are through their owners: clusterctl move takes it along.
func ownedSecret(cluster *clusterv1.Cluster, name string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: cluster.Namespace,
			Labels: map[string]string{clusterv1.ClusterNameLabel: cluster.Name},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: cluster.Name, UID: cluster.UID,
			}},
		},
		Type: clusterv1.ClusterSecretType,
		Data: data,
	}
}

// registerNodes creates a Ready Node for each provider ID of ids (capitest.RegisterNode), as each
// machine's kubelet would on joining the workload cluster (the local control plane here);
// Cluster API then gives each Machine its nodeRef.
func registerNodes(t *testing.T, s *system.Suite, ids map[string]bool) {
	t.Helper()
	for id := range ids {
		node, err := capitest.RegisterNode(s.Ctx, s.C, id, kubernetesVersion)
		if node != nil {
			t.Cleanup(func() { _ = s.C.Delete(context.Background(), node) })
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// nodesJoined waits until the Machines of the provider IDs ids have their Nodes (registerNodes)
// and the Cluster's control plane is initialized, which Cluster API says of stand-alone control
// plane machines once one has its Node.
func nodesJoined(t *testing.T, s *system.Suite, cluster *clusterv1.Cluster, ids map[string]bool) {
	t.Helper()
	// Cluster API maps a new Node to its Machine through its cached provider IDs: a Node made
	// just as the Machine's provider ID lands can go unseen until the next resync, minutes
	// later. A touch of what is still waiting has Cluster API look again now.
	polls := 0
	nudge := func(ctx context.Context, obj client.Object) error {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"test.captf.io/nudge":"%d"}}}`, polls)
		return s.C.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch)))
	}
	s.Eventually("the Machines have their Nodes and the control plane is initialized", 3*time.Minute, func(ctx context.Context) (bool, error) {
		polls++
		var machines clusterv1.MachineList
		if err := s.C.List(ctx, &machines, client.InNamespace(s.NS)); err != nil {
			return false, err
		}
		joined := 0
		for i := range machines.Items {
			m := &machines.Items[i]
			switch {
			case !ids[m.Spec.ProviderID]:
			case m.Status.NodeRef.IsDefined():
				joined++
			case polls%8 == 0:
				if err := nudge(ctx, m); err != nil {
					return false, err
				}
			}
		}
		if err := s.C.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil || joined != len(ids) {
			return false, err
		}
		// With stand-alone control plane machines, the condition (not status.initialization)
		// says so, and it is what clusterctl move checks.
		if meta.IsStatusConditionTrue(cluster.Status.Conditions, clusterv1.ClusterControlPlaneInitializedCondition) {
			return true, nil
		}
		if polls%8 == 0 {
			return false, nudge(ctx, cluster)
		}
		return false, nil
	})
}

// clusterctlInventory records what `clusterctl init` would have installed: the clusterctl label
// on Cluster API's and captf's CRDs (move discovers only labelled kinds) and the inventory of
// providers, which move compares between the two control planes. test/clusterctl runs the real
// `clusterctl init`; its providers cannot run there, because cert-manager, which issues their
// webhook certificates, cannot be built from the module proxy, so this suite's move target runs
// the managers as local processes and records their inventory here.
func clusterctlInventory(t *testing.T, env *testenv.Env) {
	t.Helper()
	ctx := context.Background()
	c, err := client.New(env.Config, client.Options{Scheme: scheme(t)})
	if err != nil {
		t.Fatal(err)
	}
	dir, err := testenv.ClusterAPIDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := env.ApplyManifests(ctx, filepath.Join(dir, "cmd", "clusterctl", "config", "manifest", "clusterctl-api.yaml")); err != nil {
		t.Fatal(err)
	}
	var crds apiextensionsv1.CustomResourceDefinitionList
	if err := c.List(ctx, &crds); err != nil {
		t.Fatal(err)
	}
	for i := range crds.Items {
		crd := &crds.Items[i]
		if !strings.HasSuffix(crd.Spec.Group, "cluster.x-k8s.io") || crd.Spec.Group == "clusterctl.cluster.x-k8s.io" {
			continue
		}
		if err := c.Patch(ctx, crd, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"clusterctl.cluster.x-k8s.io":""}}}`))); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []struct{ namespace, name, providerName, kind, version string }{
		{system.ClusterAPINamespace, "cluster-api", "cluster-api", "CoreProvider", "v1.14.2"},
		{system.KubeadmBootstrapNamespace, "bootstrap-kubeadm", "kubeadm", "BootstrapProvider", "v1.14.2"},
		{repo.Namespace, repo.ProviderLabel, repo.ProviderName, repo.ProviderType, repo.Version},
	} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		provider := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "clusterctl.cluster.x-k8s.io/v1alpha3", "kind": "Provider",
			"metadata": map[string]any{
				"name": p.name, "namespace": p.namespace,
				"labels": map[string]any{"clusterctl.cluster.x-k8s.io": "", clusterv1.ProviderNameLabel: p.name},
			},
			"providerName": p.providerName, "type": p.kind, "version": p.version,
		}}
		// The inventory's CRD was created just before: its kind is served a moment later.
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			err := c.Create(ctx, provider.DeepCopy())
			return err == nil || apierrors.IsAlreadyExists(err), nil
		})
		if err != nil {
			t.Fatalf("recording the %s provider: %v", p.name, err)
		}
	}
}

// ownedByCaptf lists the namespace's Secrets that a captf object owns: state, durable inputs,
// plan key, credential copies.
func ownedByCaptf(ctx context.Context, c client.Client, ns string) (map[string]bool, error) {
	var secrets corev1.SecretList
	if err := c.List(ctx, &secrets, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, secret := range secrets.Items {
		for _, ref := range secret.OwnerReferences {
			if strings.HasPrefix(ref.APIVersion, infrav1.GroupVersion.Group+"/") {
				names[secret.Name] = true
			}
		}
	}
	return names, nil
}

// clusterctl move takes a provisioned Cluster with its machines to a second control plane:
// the move waits for no Job, starts none, leaves nothing and destroys nothing on the source, and
// the target's captf rebuilds every status from the state that came along without applying.
func TestClusterctlMoveTakesAProvisionedClusterToAnotherControlPlane(t *testing.T) {
	s := system.NewSuite(t, "capi-move")
	_, cluster := kubeadmCluster(t, s, "web")
	kubeadmMachineDeployment(t, s, "web", "web-md-0", 2)
	ids := providerIDs(t, s, 3)
	nodesJoined(t, s, cluster, ids)

	target, err := system.Start(s.Ctx, system.Options{BinDir: s.Sys.BinDir, ClusterAPI: true})
	t.Cleanup(func() { _ = target.Stop() })
	if err != nil {
		t.Fatal(err)
	}
	clusterctlInventory(t, s.Sys.Env)
	clusterctlInventory(t, target.Env)
	targetClient, err := client.New(target.Env.Config, client.Options{Scheme: scheme(t)})
	if err != nil {
		t.Fatal(err)
	}

	secrets, err := ownedByCaptf(s.Ctx, s.C, s.NS)
	if err != nil {
		t.Fatal(err)
	}
	// Whatever the owners say, each object's state and durable inputs must travel.
	var machines infrav1.TerraformMachineList
	if err := s.C.List(s.Ctx, &machines, client.InNamespace(s.NS)); err != nil {
		t.Fatal(err)
	}
	objects := map[jobs.Kind][]string{jobs.KindCluster: {"web"}}
	for _, m := range machines.Items {
		objects[jobs.KindMachine] = append(objects[jobs.KindMachine], m.Name)
	}
	for kind, names := range objects {
		for _, name := range names {
			secrets[state.SecretName(jobs.StateSecretSuffix(s.NS, kind, name))] = true
			secrets[jobs.InputsSecretName(kind, name)] = true
		}
	}
	before := map[string]bool{}
	var list batchv1.JobList
	if err := s.C.List(s.Ctx, &list, client.InNamespace(s.NS)); err != nil {
		t.Fatal(err)
	}
	for _, j := range list.Items {
		before[j.Name] = true
	}

	c := newClusterctl(t, s)
	move := c.command(context.Background(), nil, "move", "--namespace", s.NS,
		"--kubeconfig", s.Sys.Env.Kubeconfig, "--to-kubeconfig", target.Env.Kubeconfig, "-v", "3")
	var out strings.Builder
	move.Stdout, move.Stderr = &out, &out
	if err := move.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- move.Wait() }()
	// Watch the source's Jobs for as long as the move takes: none may start.
	s.Eventually("clusterctl move finishes", 4*time.Minute, func(ctx context.Context) (bool, error) {
		var list batchv1.JobList
		if err := s.C.List(ctx, &list, client.InNamespace(s.NS)); err != nil {
			return false, err
		}
		for _, j := range list.Items {
			if !before[j.Name] {
				t.Fatalf("the Job %s started during the move", j.Name)
			}
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("clusterctl move: %v\n%s", err, out.String())
			}
			return true, nil
		default:
			return false, nil
		}
	})

	// The source keeps nothing of the cluster, and destroyed nothing: its objects were let go.
	for _, l := range []client.ObjectList{&infrav1.TerraformClusterList{}, &infrav1.TerraformMachineList{}, &clusterv1.ClusterList{}} {
		if err := s.C.List(s.Ctx, l, client.InNamespace(s.NS)); err != nil {
			t.Fatal(err)
		}
		items, err := meta.ExtractList(l)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(items); n != 0 {
			t.Errorf("%d %T items remain on the source", n, l)
		}
	}

	// Everything captf keeps arrived, and the target's captf converges without an apply.
	arrived, err := ownedByCaptf(s.Ctx, targetClient, s.NS)
	if err != nil {
		t.Fatal(err)
	}
	for name := range secrets {
		if !arrived[name] {
			t.Errorf("the Secret %s did not arrive on the target", name)
		}
	}
	var tc infrav1.TerraformCluster
	ts := &system.Suite{T: t, Ctx: s.Ctx, C: targetClient, NS: s.NS, Sys: target}
	ts.Eventually("the target's captf rebuilds every status from the moved state", 4*time.Minute, func(ctx context.Context) (bool, error) {
		if err := targetClient.Get(ctx, client.ObjectKey{Namespace: s.NS, Name: "web"}, &tc); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		var machines infrav1.TerraformMachineList
		if err := targetClient.List(ctx, &machines, client.InNamespace(s.NS)); err != nil {
			return false, err
		}
		if !tc.Status.IsProvisioned() || len(machines.Items) != 3 {
			return false, nil
		}
		for _, m := range machines.Items {
			if !m.Status.IsProvisioned() || !ids[m.Spec.ProviderID] {
				return false, nil
			}
		}
		return true, nil
	})
	var applies batchv1.JobList
	if err := targetClient.List(s.Ctx, &applies, client.InNamespace(s.NS), client.MatchingLabels{jobs.LabelOp: string(jobs.OpApply)}); err != nil {
		t.Fatal(err)
	}
	if len(applies.Items) != 0 {
		t.Errorf("the target started %d applies after the move", len(applies.Items))
	}
}

// scheme is the controller's scheme with the CRDs' kinds, which the inventory lists.
func scheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := controller.NewScheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

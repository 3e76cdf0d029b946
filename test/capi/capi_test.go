// Package capi runs Cluster API's own core manager against captf: the contract as Cluster API
// reads it, not as captf's tests play it.
package capi

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/test/system"
)

func TestMain(m *testing.M) {
	// A one-minute join token has the kubeadm bootstrap provider rotate a MachinePool's token
	// within the pool test, where its default (15m) would take longer than the suite.
	os.Exit(system.Main(m, system.Options{ClusterAPI: true, BootstrapTokenTTL: time.Minute}))
}

// A Cluster whose infrastructure is a TerraformCluster: Cluster API owns it, reads its
// provisioning and copies the endpoint the module returned.
func TestClusterAPIProvisionsAClusterThroughCaptf(t *testing.T) {
	s := system.NewSuite(t, "capi")
	ctx := context.Background()
	tc, cluster := createCluster(t, s, "web")
	s.Eventually("Cluster API sees the infrastructure provisioned, with the module's endpoint", 3*time.Minute, func(ctx context.Context) (bool, error) {
		if err := s.C.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
			return false, err
		}
		p := cluster.Status.Initialization.InfrastructureProvisioned
		return p != nil && *p && cluster.Spec.ControlPlaneEndpoint.Host == "web.local", nil
	})
	if err := s.C.Get(ctx, client.ObjectKeyFromObject(tc), tc); err != nil {
		t.Fatal(err)
	}
	if len(tc.OwnerReferences) != 1 || tc.OwnerReferences[0].Kind != "Cluster" || tc.OwnerReferences[0].UID != cluster.UID {
		t.Fatalf("the TerraformCluster's owners = %+v, want the Cluster that Cluster API made its owner", tc.OwnerReferences)
	}
	// A client of the older version reads the Cluster through Cluster API's conversion webhook.
	out, err := s.Sys.Env.Kubectl(ctx, "get", "clusters.v1beta1.cluster.x-k8s.io", "web", "-n", s.NS,
		"-o", "jsonpath={.apiVersion} {.status.infrastructureReady}").Output()
	if err != nil || string(out) != "cluster.x-k8s.io/v1beta1 true" {
		t.Fatalf("the Cluster as v1beta1: %q %v", out, err)
	}
}

// createCluster creates a TerraformCluster on the sample module and the Cluster whose
// infrastructure it is, as a user (or clusterctl's template) would.
func createCluster(t *testing.T, s *system.Suite, name string) (*infrav1.TerraformCluster, *clusterv1.Cluster) {
	t.Helper()
	tc := &infrav1.TerraformCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.NS},
		Spec: infrav1.TerraformClusterSpec{
			WorkspaceSpec: infrav1.WorkspaceSpec{Source: infrav1.SourceSpec{Image: system.SampleNoopImage}, Variables: &apiextensionsv1.JSON{Raw: []byte(fmt.Sprintf(`{"name":%q}`, name))}},
			Drift:         infrav1.DriftSpec{IntervalSeconds: ptr.To[int64](0)},
		},
	}
	if err := s.C.Create(s.Ctx, tc); err != nil {
		t.Fatal(err)
	}
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.NS},
		Spec: clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: infrav1.GroupVersion.Group, Kind: infrav1.ClusterKind.Kind, Name: tc.Name,
		}},
	}
	if err := s.C.Create(s.Ctx, cluster); err != nil {
		t.Fatal(err)
	}
	return tc, cluster
}

// kubernetesVersion is the Kubernetes version of the tests' Machines and Nodes.
const kubernetesVersion = "v1.37.2"

// newMachineDeployment creates a TerraformMachineTemplate (changed by mutate) and a
// MachineDeployment of replicas machines in the cluster, which bootstrap as bootstrap says.
func newMachineDeployment(t *testing.T, s *system.Suite, cluster, name string, replicas int32, bootstrap clusterv1.Bootstrap, mutate ...func(*infrav1.TerraformMachineTemplate)) *clusterv1.MachineDeployment {
	t.Helper()
	tmpl := &infrav1.TerraformMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.NS}}
	tmpl.Spec.Template.Spec.Source.Image = system.SampleNoopImage
	tmpl.Spec.Template.Spec.Variables = &apiextensionsv1.JSON{Raw: []byte(fmt.Sprintf(`{"name":%q}`, name))}
	for _, m := range mutate {
		m(tmpl)
	}
	if err := s.C.Create(s.Ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	md := &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.NS},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: cluster, Replicas: ptr.To(replicas),
			Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{
				ClusterName: cluster, Version: kubernetesVersion,
				Bootstrap:         bootstrap,
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "TerraformMachineTemplate", Name: tmpl.Name},
			}},
		},
	}
	if err := s.C.Create(s.Ctx, md); err != nil {
		t.Fatal(err)
	}
	return md
}

// providerIDs waits until the namespace has exactly n Machines, each with the provider ID captf
// gave it, and returns them.
func providerIDs(t *testing.T, s *system.Suite, n int) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	s.Eventually(fmt.Sprintf("%d Machines with their provider IDs", n), 4*time.Minute, func(ctx context.Context) (bool, error) {
		var machines clusterv1.MachineList
		if err := s.C.List(ctx, &machines, client.InNamespace(s.NS)); err != nil {
			return false, err
		}
		ids = map[string]bool{}
		for _, m := range machines.Items {
			if m.Spec.ProviderID != "local://"+m.Name || !m.DeletionTimestamp.IsZero() {
				return false, nil
			}
			ids[m.Spec.ProviderID] = true
		}
		return len(ids) == n, nil
	})
	return ids
}

// runs records the apply and destroy Jobs of the namespace's TerraformMachines as they are
// seen: a deleted machine's Jobs go with it, so they are counted while they exist.
type runs struct{ apply, destroy map[string]bool }

func newRuns() *runs { return &runs{apply: map[string]bool{}, destroy: map[string]bool{}} }

// see lists the Jobs now and records those not seen before.
func (r *runs) see(ctx context.Context, s *system.Suite) error {
	var list batchv1.JobList
	if err := s.C.List(ctx, &list, client.InNamespace(s.NS), client.MatchingLabels{jobs.LabelOwnerKind: infrav1.MachineKind.Kind}); err != nil {
		return err
	}
	for _, j := range list.Items {
		switch jobs.OpOf(&j) {
		case jobs.OpApply:
			r.apply[j.Name] = true
		case jobs.OpDestroy:
			r.destroy[j.Name] = true
		}
	}
	return nil
}

func scale(t *testing.T, s *system.Suite, md *clusterv1.MachineDeployment, replicas int32) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	if err := s.C.Patch(s.Ctx, md, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

// Scaling a MachineDeployment up makes a TerraformMachine, its apply and its provider ID;
// scaling down destroys what the removed machines provisioned.
func TestScalingAMachineDeploymentAppliesAndDestroysMachines(t *testing.T) {
	t.Parallel()
	s := system.NewSuite(t, "capi-scale")
	kubeadmCluster(t, s, "web")
	md := kubeadmMachineDeployment(t, s, "web", "web-md-0", 2)
	// Each count is the workers and the control plane machine.
	providerIDs(t, s, 3)
	scale(t, s, md, 3)
	providerIDs(t, s, 4)
	seen := newRuns()
	if err := seen.see(s.Ctx, s); err != nil {
		t.Fatal(err)
	}
	scale(t, s, md, 1)
	s.Eventually("the removed machines are destroyed and gone", 3*time.Minute, func(ctx context.Context) (bool, error) {
		if err := seen.see(ctx, s); err != nil {
			return false, err
		}
		var machines infrav1.TerraformMachineList
		if err := s.C.List(ctx, &machines, client.InNamespace(s.NS)); err != nil {
			return false, err
		}
		return len(machines.Items) == 2, nil
	})
	providerIDs(t, s, 2)
	if len(seen.apply) != 4 || len(seen.destroy) != 2 {
		t.Fatalf("Jobs seen: %d applies, %d destroys; want an apply per machine and a destroy per removed one", len(seen.apply), len(seen.destroy))
	}
}

// Deleting the Cluster: Cluster API deletes the machines first, captf destroys each, then the
// cluster's own infrastructure; nothing of captf's stays behind.
func TestDeletingTheClusterDestroysMachinesThenTheCluster(t *testing.T) {
	t.Parallel()
	s := system.NewSuite(t, "capi-delete")
	_, cluster := kubeadmCluster(t, s, "web")
	kubeadmMachineDeployment(t, s, "web", "web-md-0", 2)
	providerIDs(t, s, 3)
	seen := newRuns()
	if err := s.C.Delete(s.Ctx, cluster); err != nil {
		t.Fatal(err)
	}
	s.Eventually("the Cluster is gone", 4*time.Minute, func(ctx context.Context) (bool, error) {
		if err := seen.see(ctx, s); err != nil {
			return false, err
		}
		// Machines never come back, so a cluster destroy seen before a machine that is still
		// listed after it means the cluster went first.
		var clusterJobs batchv1.JobList
		if err := s.C.List(ctx, &clusterJobs, client.InNamespace(s.NS), client.MatchingLabels{jobs.LabelOwnerKind: infrav1.ClusterKind.Kind}); err != nil {
			return false, err
		}
		var machines infrav1.TerraformMachineList
		if err := s.C.List(ctx, &machines, client.InNamespace(s.NS)); err != nil {
			return false, err
		}
		for _, j := range clusterJobs.Items {
			if jobs.OpOf(&j) == jobs.OpDestroy && len(machines.Items) > 0 {
				t.Fatalf("the cluster's destroy %s started while %d TerraformMachines remain", j.Name, len(machines.Items))
			}
		}
		err := s.C.Get(ctx, client.ObjectKeyFromObject(cluster), cluster)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if len(seen.destroy) != 3 {
		t.Fatalf("%d machine destroys seen, want one per machine", len(seen.destroy))
	}
	// The Jobs are owned by the deleted objects, so the garbage collector takes them; captf
	// itself removes its state, inputs and Leases.
	s.Eventually("no Job, Secret or Lease of captf stays", time.Minute, func(ctx context.Context) (bool, error) {
		var list batchv1.JobList
		if err := s.C.List(ctx, &list, client.InNamespace(s.NS)); err != nil || len(list.Items) > 0 {
			return false, err
		}
		var secrets corev1.SecretList
		if err := s.C.List(ctx, &secrets, client.InNamespace(s.NS), client.MatchingLabels{jobs.LabelManaged: jobs.ManagedValue}); err != nil {
			return false, err
		}
		var leases coordinationv1.LeaseList
		if err := s.C.List(ctx, &leases, client.InNamespace(s.NS)); err != nil {
			return false, err
		}
		return len(secrets.Items) == 0 && len(leases.Items) == 0, nil
	})
}

// Pausing the Cluster pauses captf: a change of a machine's cluster starts no Job while paused.
func TestPausingTheClusterPausesCaptf(t *testing.T) {
	s := system.NewSuite(t, "capi-pause")
	tc, cluster := createCluster(t, s, "web")
	s.Eventually("the cluster is provisioned", 3*time.Minute, func(ctx context.Context) (bool, error) {
		err := s.C.Get(ctx, client.ObjectKeyFromObject(tc), tc)
		return err == nil && tc.Status.IsProvisioned(), err
	})
	if err := s.C.Patch(s.Ctx, cluster, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"paused":true}}`))); err != nil {
		t.Fatal(err)
	}
	s.Eventually("captf says the cluster is paused", time.Minute, func(ctx context.Context) (bool, error) {
		err := s.C.Get(ctx, client.ObjectKeyFromObject(tc), tc)
		return err == nil && conditions.IsTrue(tc.Status.Conditions, conditions.Paused), err
	})
	before := countJobs(t, s)
	s.PatchVariables(tc, `{"name":"web","size":"large"}`)
	// A pass over the change must have happened before the count means anything: the
	// observed generation says it did.
	s.Eventually("captf saw the change", time.Minute, func(ctx context.Context) (bool, error) {
		err := s.C.Get(ctx, client.ObjectKeyFromObject(tc), tc)
		c := conditions.Get(tc.Status.Conditions, conditions.Paused)
		return err == nil && c != nil && c.ObservedGeneration == tc.Generation, err
	})
	if after := countJobs(t, s); after != before {
		t.Fatalf("%d Jobs while paused, %d before", after, before)
	}
}

func countJobs(t *testing.T, s *system.Suite) int {
	t.Helper()
	var list batchv1.JobList
	if err := s.C.List(s.Ctx, &list, client.InNamespace(s.NS)); err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}

// workloadKubeconfig writes the <cluster>-kubeconfig Secret a control plane provider would,
// owned by the Cluster so clusterctl move takes it along: the local control plane stands in for
// the workload cluster, so Cluster API, which reads the workload cluster's Nodes, has one to
// connect to.
func workloadKubeconfig(t *testing.T, s *system.Suite, cluster *clusterv1.Cluster) {
	t.Helper()
	kubeconfig, err := os.ReadFile(s.Sys.Env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.C.Create(s.Ctx, ownedSecret(cluster, cluster.Name+"-kubeconfig", map[string][]byte{"value": kubeconfig})); err != nil {
		t.Fatal(err)
	}
}

// A MachinePool whose infrastructure is a TerraformMachinePool and whose bootstrap is a
// KubeadmConfig: captf applies the pool with the MachinePool's replicas and CABPK's join data,
// and Cluster API copies the module's provider ID list and replica count to the MachinePool.
// Once the pool's Nodes have joined, CABPK rotates its join token (the suite's short
// --bootstrap-token-ttl) by rewriting the bootstrap data: that is no input change, so captf
// does not apply the pool again for it, and the apply a new replica count brings carries the
// current token.
func TestAMachinePoolGetsItsProviderIDsAndATokenRotationIsNoInputChange(t *testing.T) {
	t.Parallel()
	s := system.NewSuite(t, "capi-pool")
	kubeadmCluster(t, s, "web")
	h := watchHistory(t, s, map[string]client.ObjectList{"Job": &batchv1.JobList{}})
	// Provider IDs name Nodes of the one workload cluster all tests share.
	name := s.NS + "-pool"
	pool := &infrav1.TerraformMachinePool{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.NS}}
	pool.Spec.Source.Image = system.SampleNoopImage
	pool.Spec.Variables = &apiextensionsv1.JSON{Raw: []byte(fmt.Sprintf(`{"name":%q}`, name))}
	pool.Spec.MembershipRefreshIntervalSeconds = ptr.To[int32](15)
	mp := &clusterv1.MachinePool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.NS},
		Spec: clusterv1.MachinePoolSpec{
			ClusterName: "web", Replicas: ptr.To[int32](2),
			Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{
				ClusterName: "web", Version: kubernetesVersion,
				Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: kubeadmConfigKind.Group, Kind: kubeadmConfigKind.Kind, Name: name,
				}},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "TerraformMachinePool", Name: pool.Name},
			}},
		},
	}
	for _, obj := range []client.Object{pool, kubeadmObject(kubeadmConfigKind, s.NS, name), mp} {
		if err := s.C.Create(s.Ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	members := func(n int) []string {
		var ids []string
		for i := range n {
			ids = append(ids, fmt.Sprintf("local://%s-%d", name, i))
		}
		return ids
	}
	s.Eventually("the MachinePool has the module's provider IDs and its Nodes", 4*time.Minute, func(ctx context.Context) (bool, error) {
		err := s.C.Get(ctx, client.ObjectKeyFromObject(mp), mp)
		return err == nil && slices.Equal(mp.Spec.ProviderIDList, members(2)) && ptr.Deref(mp.Status.Replicas, 0) == 2 && len(mp.Status.NodeRefs) == 2, err
	})
	first, _, err := poolJoin(s.Ctx, s, name)
	if err != nil {
		t.Fatal(err)
	}
	if applied := appliedPoolBootstrapData(t, s, name); !strings.Contains(applied, "token: "+first) {
		t.Fatalf("the pool was applied without its KubeadmConfig's token %q:\n%s", first, applied)
	}

	var rotated time.Time
	s.Eventually("CABPK rotates the pool's join token", 3*time.Minute, func(ctx context.Context) (bool, error) {
		token, data, err := poolJoin(ctx, s, name)
		rotated = time.Now()
		return err == nil && token != first && strings.Contains(data, "token: "+token), err
	})
	// A membership refresh started after the rotation follows a pass that read the rotated
	// data (creation times are whole seconds): that pass found no input change.
	waitSeen(t, h, "a membership refresh after the rotation", "Job", 2*time.Minute, func(j *batchv1.Job) bool {
		return isPoolRun(j, jobs.OpRefresh) && j.CreationTimestamp.After(rotated.Add(time.Second))
	})
	if n := len(poolRuns(h, jobs.OpApply)); n != 1 {
		t.Fatalf("%d applies of the pool, want only the first: a rotated token is no input change", n)
	}
	if applied := appliedPoolBootstrapData(t, s, name); !strings.Contains(applied, "token: "+first) {
		t.Fatalf("the pool's last apply is not the first one:\n%s", applied)
	}

	if err := s.C.Patch(s.Ctx, mp, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":3}}`))); err != nil {
		t.Fatal(err)
	}
	s.Eventually("the MachinePool grows to three members", 4*time.Minute, func(ctx context.Context) (bool, error) {
		err := s.C.Get(ctx, client.ObjectKeyFromObject(mp), mp)
		return err == nil && slices.Equal(mp.Spec.ProviderIDList, members(3)) && ptr.Deref(mp.Status.Replicas, 0) == 3, err
	})
	if n := len(poolRuns(h, jobs.OpApply)); n != 2 {
		t.Fatalf("%d applies of the pool, want the first and the scale-up's", n)
	}
	// CABPK may have rotated the token again since: the apply carries a token, not the first.
	applied := appliedPoolBootstrapData(t, s, name)
	if m := joinToken.FindStringSubmatch(applied); m == nil || m[1] == first {
		t.Fatalf("the scale-up applied the pool without a rotated token (the first was %q):\n%s", first, applied)
	}
}

// joinToken matches the bootstrap token of kubeadm join data.
var joinToken = regexp.MustCompile(`token: ([a-z0-9]{6}\.[a-z0-9]{16})`)

// isPoolRun reports whether the Job is a TerraformMachinePool's run of the operation.
func isPoolRun(j *batchv1.Job, op jobs.Op) bool {
	owner := metav1.GetControllerOf(j)
	return owner != nil && owner.Kind == infrav1.MachinePoolKind.Kind && jobs.OpOf(j) == op
}

// poolRuns returns the names of the TerraformMachinePools' Jobs of the operation seen.
func poolRuns(h *history, op jobs.Op) map[string]bool {
	names := map[string]bool{}
	for _, j := range seen[*batchv1.Job](h, "Job") {
		if isPoolRun(j, op) {
			names[j.Name] = true
		}
	}
	return names
}

// poolJoin returns the join token of the pool's KubeadmConfig and the bootstrap data CABPK
// wrote for it.
func poolJoin(ctx context.Context, s *system.Suite, name string) (token, data string, err error) {
	config := kubeadmObject(kubeadmConfigKind, s.NS, name)
	if err := s.C.Get(ctx, client.ObjectKeyFromObject(config), config); err != nil {
		return "", "", err
	}
	token, _, _ = unstructured.NestedString(config.Object, "spec", "joinConfiguration", "discovery", "bootstrapToken", "token")
	secretName, _, _ := unstructured.NestedString(config.Object, "status", "dataSecretName")
	var secret corev1.Secret
	if err := s.C.Get(ctx, client.ObjectKey{Namespace: s.NS, Name: secretName}, &secret); err != nil {
		return "", "", err
	}
	return token, string(secret.Data["value"]), nil
}

// appliedPoolBootstrapData returns the bootstrap data of the pool's last apply, from its
// durable inputs.
func appliedPoolBootstrapData(t *testing.T, s *system.Suite, name string) string {
	t.Helper()
	data, err := base64.StdEncoding.DecodeString(appliedBootstrapData(t, s, jobs.KindMachinePool, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

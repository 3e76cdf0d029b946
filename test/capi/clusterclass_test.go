package capi

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/test/capitest"
	"github.com/captf/captf/test/system"
)

// A Cluster made from a ClusterClass provisions through captf: Cluster API's topology controller
// makes the TerraformCluster from the class's TerraformClusterTemplate and the workers'
// TerraformMachines from its TerraformMachineTemplate, each Machine bootstrapped by a
// KubeadmConfig of the class's KubeadmConfigTemplate. Scaling the topology adds one machine with
// one apply; pointing the class at a new machine template replaces every worker with one of the
// new template's variables, and captf destroys each old one. The topology controller's dry runs
// pass captf's template webhooks all along.
//
// The control plane is a capitest.LocalControlPlane (a ClusterClass must name a control plane
// template, and the kubeadm control plane cannot initialize without kubeadm on a node), which
// writes the cluster's CA and, as in the other tests, the local kube-apiserver's kubeconfig: that
// is the workload cluster, and capitest.RunLocalNodes registers each machine's Node in it.
func TestAClusterClassClusterProvisionsThroughCaptf(t *testing.T) {
	t.Parallel()
	s := system.NewSuite(t, "capi-cc")
	localControlPlanes(t, s)
	localNodes(t, s)
	h := watchHistory(t, s, map[string]client.ObjectList{
		"Machine": &clusterv1.MachineList{}, "TerraformMachine": &infrav1.TerraformMachineList{}, "Job": &batchv1.JobList{}, "Cluster": &clusterv1.ClusterList{},
	})
	class := clusterClass(t, s, "cc", workerTemplate(t, s, "worker-v1", `{"name":"worker"}`))
	cluster := topologyCluster(t, s, "cc", class, 2)

	s.Eventually("the Cluster's infrastructure is provisioned and its control plane initialized", 3*time.Minute, func(ctx context.Context) (bool, error) {
		err := s.C.Get(ctx, client.ObjectKeyFromObject(cluster), cluster)
		done := cluster.Status.Initialization
		return err == nil && ptr.Deref(done.InfrastructureProvisioned, false) && ptr.Deref(done.ControlPlaneInitialized, false), err
	})
	clonedTerraformCluster(t, s, cluster, "cc")
	machines := topologyWorkers(t, s, 2, "worker-v1", nil)
	for _, m := range machines {
		if data := kubeadmBootstrapData(t, s, m); !strings.Contains(data, "kubeadm join --config") {
			t.Errorf("the worker %s's bootstrap data does not join:\n%s", m.Name, data)
		}
	}

	before := applies(h)
	scaleTopology(t, s, cluster, 3)
	machines = topologyWorkers(t, s, 3, "worker-v1", nil)
	if after := applies(h); len(after) != len(before)+1 {
		t.Errorf("scaling 2 to 3 ran %d applies, want 1: %v then %v", len(after)-len(before), before, after)
	}

	old := map[string]bool{}
	for _, m := range machines {
		old[m.Name] = true
	}
	pointWorkersAt(t, s, class, workerTemplate(t, s, "worker-v2", `{"name":"worker","size":"large"}`))
	topologyWorkers(t, s, 3, "worker-v2", old)
	for name := range old {
		destroyedByJob(t, s, h, name)
	}

	clonedTemplateIsImmutable(t, s, cluster)
	s.Eventually("the topology is reconciled", time.Minute, func(ctx context.Context) (bool, error) {
		err := s.C.Get(ctx, client.ObjectKeyFromObject(cluster), cluster)
		return err == nil && meta.IsStatusConditionTrue(cluster.Status.Conditions, clusterv1.ClusterTopologyReconciledCondition), err
	})
	if c, found := find(h, "Cluster", func(c *clusterv1.Cluster) bool {
		cond := meta.FindStatusCondition(c.Status.Conditions, clusterv1.ClusterTopologyReconciledCondition)
		return cond != nil && strings.Contains(cond.Message, "webhook")
	}); found {
		t.Errorf("a webhook refused the topology controller: %+v", meta.FindStatusCondition(c.Status.Conditions, clusterv1.ClusterTopologyReconciledCondition))
	}
}

// localControlPlanes installs the LocalControlPlane kinds, readable by the kubeadm bootstrap
// provider, and runs capitest.RunLocalControlPlanes for the suite's namespace until the test
// ends, with the local admin kubeconfig.
func localControlPlanes(t *testing.T, s *system.Suite) {
	t.Helper()
	cabpk := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: system.KubeadmBootstrapNamespace, Name: system.KubeadmBootstrapSA}
	if err := capitest.InstallLocalControlPlane(s.Ctx, s.Sys.Env.Config, cabpk); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := os.ReadFile(s.Sys.Env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- capitest.RunLocalControlPlanes(ctx, s.C, s.NS, kubeconfig) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("local control planes: %v", err)
		}
	})
}

// templateRef is a ClusterClass's reference to a template of the kind.
func templateRef(gvk schema.GroupVersionKind, name string) clusterv1.ClusterClassTemplateReference {
	return clusterv1.ClusterClassTemplateReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: name}
}

// workerTemplate creates a TerraformMachineTemplate of the sample module with the variables.
func workerTemplate(t *testing.T, s *system.Suite, name, variables string) *infrav1.TerraformMachineTemplate {
	t.Helper()
	tmpl := &infrav1.TerraformMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.NS}}
	tmpl.Spec.Template.Spec.Source.Image = system.SampleNoopImage
	tmpl.Spec.Template.Spec.Variables = &apiextensionsv1.JSON{Raw: []byte(variables)}
	if err := s.C.Create(s.Ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// clusterClass creates a ClusterClass and its templates: a TerraformClusterTemplate of the sample
// module, a LocalControlPlaneTemplate, and a worker class "default-worker" of the machine
// template worker and a KubeadmConfigTemplate; it waits until Cluster API has reconciled it, as
// its Cluster webhook wants before it validates a Cluster of the class.
func clusterClass(t *testing.T, s *system.Suite, name string, worker *infrav1.TerraformMachineTemplate) *clusterv1.ClusterClass {
	t.Helper()
	infra := &infrav1.TerraformClusterTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.NS}}
	infra.Spec.Template.Spec.Source.Image = system.SampleNoopImage
	infra.Spec.Template.Spec.Variables = &apiextensionsv1.JSON{Raw: []byte(fmt.Sprintf(`{"name":%q}`, name))}
	infra.Spec.Template.Spec.Drift.IntervalSeconds = ptr.To[int64](0)
	controlPlane := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{}}}}}
	controlPlane.SetGroupVersionKind(capitest.LocalControlPlaneTemplateKind)
	controlPlane.SetNamespace(s.NS)
	controlPlane.SetName(name)
	bootstrap := kubeadmObject(kubeadmConfigTemplateKind, s.NS, name+"-worker")
	class := &clusterv1.ClusterClass{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.NS},
		Spec: clusterv1.ClusterClassSpec{
			Infrastructure: clusterv1.InfrastructureClass{TemplateRef: templateRef(infrav1.GroupVersion.WithKind("TerraformClusterTemplate"), infra.Name)},
			ControlPlane:   clusterv1.ControlPlaneClass{TemplateRef: templateRef(capitest.LocalControlPlaneTemplateKind, controlPlane.GetName())},
			Workers: clusterv1.WorkersClass{MachineDeployments: []clusterv1.MachineDeploymentClass{{
				Class:          "default-worker",
				Bootstrap:      clusterv1.MachineDeploymentClassBootstrapTemplate{TemplateRef: templateRef(kubeadmConfigTemplateKind, bootstrap.GetName())},
				Infrastructure: clusterv1.MachineDeploymentClassInfrastructureTemplate{TemplateRef: templateRef(infrav1.GroupVersion.WithKind("TerraformMachineTemplate"), worker.Name)},
			}}},
		},
	}
	for _, obj := range []client.Object{infra, controlPlane, bootstrap, class} {
		if err := s.C.Create(s.Ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	classReconciled(t, s, class)
	return class
}

// classReconciled waits until Cluster API has reconciled the ClusterClass's generation.
func classReconciled(t *testing.T, s *system.Suite, class *clusterv1.ClusterClass) {
	t.Helper()
	s.Eventually("Cluster API reconciles the ClusterClass", time.Minute, func(ctx context.Context) (bool, error) {
		err := s.C.Get(ctx, client.ObjectKeyFromObject(class), class)
		return err == nil && class.Status.ObservedGeneration == class.Generation &&
			meta.IsStatusConditionTrue(class.Status.Conditions, clusterv1.ClusterClassVariablesReadyCondition), err
	})
}

// topologyCluster creates a Cluster of the class with one MachineDeployment "md-0" of the worker
// class and replicas machines.
func topologyCluster(t *testing.T, s *system.Suite, name string, class *clusterv1.ClusterClass, replicas int32) *clusterv1.Cluster {
	t.Helper()
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.NS},
		Spec: clusterv1.ClusterSpec{Topology: clusterv1.Topology{
			ClassRef: clusterv1.ClusterClassRef{Name: class.Name},
			Version:  kubernetesVersion,
			Workers: clusterv1.WorkersTopology{MachineDeployments: []clusterv1.MachineDeploymentTopology{{
				Class: "default-worker", Name: "md-0", Replicas: ptr.To(replicas),
			}}},
		}},
	}
	if err := s.C.Create(s.Ctx, cluster); err != nil {
		t.Fatal(err)
	}
	return cluster
}

// clonedTerraformCluster checks that the Cluster's infrastructure is a TerraformCluster the
// topology controller cloned from the class's template, provisioned by captf.
func clonedTerraformCluster(t *testing.T, s *system.Suite, cluster *clusterv1.Cluster, template string) {
	t.Helper()
	ref := cluster.Spec.InfrastructureRef
	if ref.APIGroup != infrav1.GroupVersion.Group || ref.Kind != infrav1.ClusterKind.Kind {
		t.Fatalf("the Cluster's infrastructure is %+v, want a TerraformCluster", ref)
	}
	var tc infrav1.TerraformCluster
	if err := s.C.Get(s.Ctx, client.ObjectKey{Namespace: s.NS, Name: ref.Name}, &tc); err != nil {
		t.Fatal(err)
	}
	if from := tc.Annotations[clusterv1.TemplateClonedFromNameAnnotation]; from != template || !tc.Status.IsProvisioned() {
		t.Errorf("the TerraformCluster %s: cloned from %q, provisioned %v; want cloned from %s and provisioned", tc.Name, from, tc.Status.IsProvisioned(), template)
	}
}

// topologyWorkers waits until the topology's MachineDeployment md-0 has exactly n Machines, all
// up to date and ready, each with its provider ID, its Node and a TerraformMachine cloned from a
// clone of the template, and none of the names in gone; it returns them.
func topologyWorkers(t *testing.T, s *system.Suite, n int, template string, gone map[string]bool) []*clusterv1.Machine {
	t.Helper()
	var out []*clusterv1.Machine
	s.Eventually(fmt.Sprintf("%d ready workers on %s", n, template), 4*time.Minute, func(ctx context.Context) (bool, error) {
		var mds clusterv1.MachineDeploymentList
		if err := s.C.List(ctx, &mds, client.InNamespace(s.NS), client.MatchingLabels{clusterv1.ClusterTopologyMachineDeploymentNameLabel: "md-0"}); err != nil || len(mds.Items) != 1 {
			return false, err
		}
		md := &mds.Items[0]
		status := md.Status
		if ptr.Deref(md.Spec.Replicas, 0) != int32(n) || ptr.Deref(status.Replicas, 0) != int32(n) ||
			ptr.Deref(status.ReadyReplicas, 0) != int32(n) || ptr.Deref(status.UpToDateReplicas, 0) != int32(n) {
			return false, nil
		}
		var machines clusterv1.MachineList
		if err := s.C.List(ctx, &machines, client.InNamespace(s.NS), client.MatchingLabels{clusterv1.ClusterTopologyMachineDeploymentNameLabel: "md-0"}); err != nil {
			return false, err
		}
		out = nil
		for i := range machines.Items {
			m := &machines.Items[i]
			if gone[m.Name] || !m.DeletionTimestamp.IsZero() || m.Spec.ProviderID != "local://"+m.Name || !m.Status.NodeRef.IsDefined() {
				return false, nil
			}
			ok, err := fromTemplate(ctx, s, m, template)
			if err != nil || !ok {
				return false, err
			}
			out = append(out, m)
		}
		return len(out) == n, nil
	})
	return out
}

// fromTemplate reports whether the Machine's TerraformMachine is provisioned and carries the
// template's variables, cloned through the MachineDeployment's clone of the template.
func fromTemplate(ctx context.Context, s *system.Suite, m *clusterv1.Machine, template string) (bool, error) {
	var tm infrav1.TerraformMachine
	if err := s.C.Get(ctx, client.ObjectKey{Namespace: s.NS, Name: m.Spec.InfrastructureRef.Name}, &tm); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	var clone, tmpl infrav1.TerraformMachineTemplate
	if err := s.C.Get(ctx, client.ObjectKey{Namespace: s.NS, Name: tm.Annotations[clusterv1.TemplateClonedFromNameAnnotation]}, &clone); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if err := s.C.Get(ctx, client.ObjectKey{Namespace: s.NS, Name: template}, &tmpl); err != nil {
		return false, err
	}
	return tm.Status.IsProvisioned() && clone.Annotations[clusterv1.TemplateClonedFromNameAnnotation] == template &&
		sameJSON(tm.Spec.Variables, tmpl.Spec.Template.Spec.Variables), nil
}

// sameJSON reports whether two JSON values are equal as values.
func sameJSON(a, b *apiextensionsv1.JSON) bool {
	var x, y any
	if a == nil || b == nil || json.Unmarshal(a.Raw, &x) != nil || json.Unmarshal(b.Raw, &y) != nil {
		return a == b
	}
	ax, _ := json.Marshal(x)
	by, _ := json.Marshal(y)
	return string(ax) == string(by)
}

// applies returns the names of the TerraformMachines' apply Jobs seen.
func applies(h *history) map[string]bool {
	names := map[string]bool{}
	for _, j := range seen[*batchv1.Job](h, "Job") {
		if owner := metav1.GetControllerOf(j); owner != nil && owner.Kind == infrav1.MachineKind.Kind && jobs.OpOf(j) == jobs.OpApply {
			names[j.Name] = true
		}
	}
	return names
}

// scaleTopology sets the replicas of the topology's MachineDeployment md-0.
func scaleTopology(t *testing.T, s *system.Suite, cluster *clusterv1.Cluster, replicas int32) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := s.C.Get(s.Ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
			return err
		}
		cluster.Spec.Topology.Workers.MachineDeployments[0].Replicas = ptr.To(replicas)
		return s.C.Update(s.Ctx, cluster)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// pointWorkersAt points the class's worker class at another TerraformMachineTemplate.
func pointWorkersAt(t *testing.T, s *system.Suite, class *clusterv1.ClusterClass, tmpl *infrav1.TerraformMachineTemplate) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := s.C.Get(s.Ctx, client.ObjectKeyFromObject(class), class); err != nil {
			return err
		}
		class.Spec.Workers.MachineDeployments[0].Infrastructure.TemplateRef.Name = tmpl.Name
		return s.C.Update(s.Ctx, class)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// destroyedByJob checks that the Machine's TerraformMachine was deleted after a destroy Job
// that succeeded.
func destroyedByJob(t *testing.T, s *system.Suite, h *history, machine string) {
	t.Helper()
	m, ok := find(h, "Machine", func(m *clusterv1.Machine) bool { return m.Name == machine })
	if !ok {
		t.Fatalf("the Machine %s was never seen", machine)
	}
	tm := m.Spec.InfrastructureRef.Name
	s.Eventually("the TerraformMachine "+tm+" is gone", time.Minute, func(context.Context) (bool, error) {
		return h.wasDeleted("TerraformMachine", tm), nil
	})
	if _, ok := find(h, "Job", func(j *batchv1.Job) bool {
		owner := metav1.GetControllerOf(j)
		return owner != nil && owner.Kind == infrav1.MachineKind.Kind && owner.Name == tm && jobs.OpOf(j) == jobs.OpDestroy && jobs.OutcomeOf(j).Succeeded()
	}); !ok {
		t.Errorf("no successful destroy Job of the TerraformMachine %s was seen", tm)
	}
}

// clonedTemplateIsImmutable checks that captf's webhook refuses a plain change of the
// TerraformMachineTemplate the topology cloned for the MachineDeployment: the dry runs the
// topology controller made of such changes went through that webhook.
func clonedTemplateIsImmutable(t *testing.T, s *system.Suite, cluster *clusterv1.Cluster) {
	t.Helper()
	var mds clusterv1.MachineDeploymentList
	if err := s.C.List(s.Ctx, &mds, client.InNamespace(s.NS), client.MatchingLabels{clusterv1.ClusterNameLabel: cluster.Name}); err != nil || len(mds.Items) != 1 {
		t.Fatalf("the cluster's MachineDeployments: %d, %v", len(mds.Items), err)
	}
	var clone infrav1.TerraformMachineTemplate
	if err := s.C.Get(s.Ctx, client.ObjectKey{Namespace: s.NS, Name: mds.Items[0].Spec.Template.Spec.InfrastructureRef.Name}, &clone); err != nil {
		t.Fatal(err)
	}
	clone.Spec.Template.Spec.Variables = &apiextensionsv1.JSON{Raw: []byte(`{"name":"worker","size":"huge"}`)}
	if err := s.C.Update(s.Ctx, &clone); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "immutable") {
		t.Errorf("changing the cloned template %s: %v, want captf's webhook to refuse it", clone.Name, err)
	}
}

package capi

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/contract"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/test/capitest"
	"github.com/captf/captf/test/system"
)

// A MachineHealthCheck replaces an unhealthy worker of a MachineDeployment through captf: Cluster
// API marks the Machine, its MachineSet deletes it, captf destroys what the machine's module
// provisioned with a destroy Job, and the replacement Machine gets a new TerraformMachine, a new
// apply and a new provider ID. Each row makes a machine unhealthy its own way.
//
// As in TestKubeadmBootstrapsTheMachines, the local kube-apiserver is the workload cluster and
// a stand-alone control plane machine's Node initializes it; every Node is registered by
// capitest.RunLocalNodes, which stands in for the kubelets, as each machine gets its provider ID.
func TestAMachineHealthCheckReplacesAnUnhealthyMachine(t *testing.T) {
	t.Parallel()
	for _, row := range []struct {
		name string
		// remediation is the workers' spec.remediation.
		remediation infrav1.MachineRemediationSpec
		// makeUnhealthy makes the worker victim unhealthy.
		makeUnhealthy func(t *testing.T, s *system.Suite, h *history, victim *clusterv1.Machine)
		// reason is the victim's HealthCheckSucceeded reason.
		reason string
	}{
		{
			name:          "a Node that goes NotReady is replaced",
			makeUnhealthy: nodeGoesNotReady,
			reason:        clusterv1.MachineHealthCheckUnhealthyNodeReason,
		},
		{
			name: "a machine its module reports terminated is replaced",
			// The health is read again every hour only, so that no refresh overwrites the test's
			// stand-in for one (moduleReportsTerminated) while the test runs.
			remediation:   infrav1.MachineRemediationSpec{AnnotateMachine: true, HealthCheckIntervalSeconds: ptr.To[int64](3600)},
			makeUnhealthy: moduleReportsTerminated,
			reason:        clusterv1.MachineHealthCheckHasRemediateAnnotationReason,
		},
	} {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			s := system.NewSuite(t, "capi-mhc")
			_, cluster := kubeadmCluster(t, s, "web")
			md := kubeadmMachineDeployment(t, s, "web", "web-md-0", 2, func(tmpl *infrav1.TerraformMachineTemplate) {
				tmpl.Spec.Template.Spec.Remediation = row.remediation
			})
			mhc := machineHealthCheck(t, s, md)
			h := watchHistory(t, s, map[string]client.ObjectList{
				"Machine": &clusterv1.MachineList{}, "TerraformMachine": &infrav1.TerraformMachineList{}, "Job": &batchv1.JobList{},
			})
			ids := providerIDs(t, s, 3)
			nodesJoined(t, s, cluster, ids)
			s.Eventually("the MachineHealthCheck finds both workers healthy", time.Minute, func(ctx context.Context) (bool, error) {
				err := s.C.Get(ctx, client.ObjectKeyFromObject(mhc), mhc)
				return err == nil && ptr.Deref(mhc.Status.ExpectedMachines, 0) == 2 && ptr.Deref(mhc.Status.CurrentHealthy, 0) == 2, err
			})

			victim := workers(t, s, md)[0]
			row.makeUnhealthy(t, s, h, victim)
			remediated(t, s, h, victim, row.reason)
			replaced(t, s, md, victim)
		})
	}
}

// localNodes runs capitest.RunLocalNodes for the suite's namespace until the test ends.
func localNodes(t *testing.T, s *system.Suite) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- capitest.RunLocalNodes(ctx, s.C, s.NS) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("local nodes: %v", err)
		}
	})
}

// machineHealthCheck creates a MachineHealthCheck of the MachineDeployment's machines: a Node
// Ready False or Unknown for 5 s is unhealthy, and so is a machine without a Node 3 minutes
// after its infrastructure is ready (longer than the test takes, if each machine gets its Node).
func machineHealthCheck(t *testing.T, s *system.Suite, md *clusterv1.MachineDeployment) *clusterv1.MachineHealthCheck {
	t.Helper()
	mhc := &clusterv1.MachineHealthCheck{
		ObjectMeta: metav1.ObjectMeta{Name: md.Name, Namespace: s.NS},
		Spec: clusterv1.MachineHealthCheckSpec{
			ClusterName: md.Spec.ClusterName,
			Selector:    metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.MachineDeploymentNameLabel: md.Name}},
			Checks: clusterv1.MachineHealthCheckChecks{
				NodeStartupTimeoutSeconds: ptr.To[int32](180),
				UnhealthyNodeConditions: []clusterv1.UnhealthyNodeCondition{
					{Type: corev1.NodeReady, Status: corev1.ConditionFalse, TimeoutSeconds: ptr.To[int32](5)},
					{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, TimeoutSeconds: ptr.To[int32](5)},
				},
			},
		},
	}
	if err := s.C.Create(s.Ctx, mhc); err != nil {
		t.Fatal(err)
	}
	return mhc
}

// workers returns the MachineDeployment's Machines that are not being deleted, by name.
func workers(t *testing.T, s *system.Suite, md *clusterv1.MachineDeployment) []*clusterv1.Machine {
	t.Helper()
	var list clusterv1.MachineList
	if err := s.C.List(s.Ctx, &list, client.InNamespace(s.NS), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: md.Name}); err != nil {
		t.Fatal(err)
	}
	var out []*clusterv1.Machine
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp.IsZero() {
			out = append(out, &list.Items[i])
		}
	}
	slices.SortFunc(out, func(a, b *clusterv1.Machine) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// nodeGoesNotReady reports the victim's Node NotReady, as the node lifecycle controller or a
// failing kubelet would.
func nodeGoesNotReady(t *testing.T, s *system.Suite, _ *history, victim *clusterv1.Machine) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var node corev1.Node
		if err := s.C.Get(s.Ctx, client.ObjectKey{Name: victim.Status.NodeRef.Name}, &node); err != nil {
			return err
		}
		for i := range node.Status.Conditions {
			if c := &node.Status.Conditions[i]; c.Type == corev1.NodeReady {
				c.Status, c.Reason, c.Message = corev1.ConditionFalse, "KubeletNotReady", "the test made the node NotReady"
				c.LastTransitionTime, c.LastHeartbeatTime = metav1.Now(), metav1.Now()
			}
		}
		return s.C.Status().Update(s.Ctx, &node)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// moduleReportsTerminated makes the victim's module report its instance terminated, and checks
// that captf says so to Cluster API: the TerraformMachine's Ready is False/InstanceTerminated,
// the Machine's InfrastructureReady follows, and captf asks for the Machine's replacement with
// cluster.x-k8s.io/remediate-machine (spec.remediation.annotateMachine).
//
// The test stands in for the refresh that would find the instance gone: the no-op module's
// instances never go, so the test rewrites the machine's state Secret as such a refresh would
// leave it, the module's health output saying terminated at the next serial, the rest as the
// runner wrote it.
func moduleReportsTerminated(t *testing.T, s *system.Suite, h *history, victim *clusterv1.Machine) {
	t.Helper()
	machine := victim.Spec.InfrastructureRef.Name
	// The refresh after the apply reads the health once the machine is provisioned; a rewrite
	// before it ends would be overwritten.
	s.Eventually("the machine's refresh after its apply succeeded", 2*time.Minute, func(ctx context.Context) (bool, error) {
		var list batchv1.JobList
		if err := s.C.List(ctx, &list, client.InNamespace(s.NS), client.MatchingLabels(jobs.OwnerLabels(jobs.KindMachine, machine))); err != nil {
			return false, err
		}
		_, _, refreshed := jobs.NewestSuccess(list.Items, jobs.OpRefresh)
		return refreshed && jobs.ActiveJob(list.Items) == nil, nil
	})
	rewriteHealth(t, s, machine, contract.HealthTerminated, false)

	waitSeen(t, h, "the TerraformMachine is Ready False/InstanceTerminated", "TerraformMachine", time.Minute, func(tm *infrav1.TerraformMachine) bool {
		c := conditions.Get(tm.Status.Conditions, conditions.Ready)
		return tm.Name == machine && c != nil && c.Status == metav1.ConditionFalse && c.Reason == conditions.ReasonInstanceTerminated
	})
	waitSeen(t, h, "the Machine's InfrastructureReady is False/InstanceTerminated", "Machine", time.Minute, func(m *clusterv1.Machine) bool {
		c := meta.FindStatusCondition(m.Status.Conditions, clusterv1.MachineInfrastructureReadyCondition)
		return m.Name == victim.Name && c != nil && c.Status == metav1.ConditionFalse && c.Reason == conditions.ReasonInstanceTerminated
	})
	waitSeen(t, h, "captf annotates the Machine for remediation", "Machine", time.Minute, func(m *clusterv1.Machine) bool {
		_, annotated := m.Annotations[clusterv1.RemediateMachineAnnotation]
		return m.Name == victim.Name && annotated
	})
}

// rewriteHealth rewrites a TerraformMachine's state Secret with the module's health output
// saying healthState and healthy, at the next serial, keeping the rest of the state and the
// Secret as they were.
func rewriteHealth(t *testing.T, s *system.Suite, machine, healthState string, healthy bool) {
	t.Helper()
	key := client.ObjectKey{Namespace: s.NS, Name: state.SecretName(jobs.StateSecretSuffix(s.NS, jobs.KindMachine, machine))}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var secret corev1.Secret
		if err := s.C.Get(s.Ctx, key, &secret); err != nil {
			return err
		}
		gz, err := gzip.NewReader(bytes.NewReader(secret.Data["tfstate"]))
		if err != nil {
			return err
		}
		doc, err := io.ReadAll(gz)
		if err != nil {
			return err
		}
		if doc, err = withHealth(doc, healthState, healthy); err != nil {
			return err
		}
		if secret.Data["tfstate"], err = state.Compress(doc); err != nil {
			return err
		}
		return s.C.Update(s.Ctx, &secret)
	})
	if err != nil {
		t.Fatalf("rewriting the state of %s: %v", machine, err)
	}
}

// withHealth returns the state document with the next serial and the health output's state
// and healthy replaced. Only those two fields change, so every output keeps its type.
func withHealth(doc []byte, healthState string, healthy bool) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(doc, &top); err != nil {
		return nil, err
	}
	var serial int64
	if err := json.Unmarshal(top["serial"], &serial); err != nil {
		return nil, fmt.Errorf("the state's serial: %w", err)
	}
	var outputs map[string]map[string]json.RawMessage
	if err := json.Unmarshal(top["outputs"], &outputs); err != nil {
		return nil, fmt.Errorf("the state's outputs: %w", err)
	}
	workspace, ok := outputs[contract.WorkspaceOutput]
	if !ok {
		return nil, fmt.Errorf("the state has no %s output", contract.WorkspaceOutput)
	}
	var value map[string]json.RawMessage
	if err := json.Unmarshal(workspace["value"], &value); err != nil {
		return nil, fmt.Errorf("the %s output: %w", contract.WorkspaceOutput, err)
	}
	var health map[string]json.RawMessage
	if err := json.Unmarshal(value[contract.OutputHealth], &health); err != nil {
		return nil, fmt.Errorf("the health output: %w", err)
	}
	health["state"], _ = json.Marshal(healthState)
	health["healthy"], _ = json.Marshal(healthy)
	var err error
	if value[contract.OutputHealth], err = json.Marshal(health); err != nil {
		return nil, err
	}
	if workspace["value"], err = json.Marshal(value); err != nil {
		return nil, err
	}
	if top["outputs"], err = json.Marshal(outputs); err != nil {
		return nil, err
	}
	top["serial"], _ = json.Marshal(serial + 1)
	return json.Marshal(top)
}

// remediated checks that the MachineHealthCheck marked the victim unhealthy for reason, that its
// MachineSet remediated it by deleting it, that captf destroyed its TerraformMachine with a
// destroy Job that succeeded, and that Cluster API deleted its Node.
func remediated(t *testing.T, s *system.Suite, h *history, victim *clusterv1.Machine, reason string) {
	t.Helper()
	waitSeen(t, h, "the MachineHealthCheck marks the Machine unhealthy", "Machine", time.Minute, func(m *clusterv1.Machine) bool {
		c := meta.FindStatusCondition(m.Status.Conditions, clusterv1.MachineHealthCheckSucceededCondition)
		return m.Name == victim.Name && c != nil && c.Status == metav1.ConditionFalse && c.Reason == reason
	})
	waitSeen(t, h, "its MachineSet remediates the Machine by deleting it", "Machine", time.Minute, func(m *clusterv1.Machine) bool {
		c := meta.FindStatusCondition(m.Status.Conditions, clusterv1.MachineOwnerRemediatedCondition)
		return m.Name == victim.Name && c != nil && c.Status == metav1.ConditionFalse && !m.DeletionTimestamp.IsZero()
	})
	machine := victim.Spec.InfrastructureRef.Name
	s.Eventually("the Machine and its TerraformMachine are gone", 3*time.Minute, func(context.Context) (bool, error) {
		return h.wasDeleted("Machine", victim.Name) && h.wasDeleted("TerraformMachine", machine), nil
	})
	destroy, _ := find(h, "Job", func(j *batchv1.Job) bool {
		owner := metav1.GetControllerOf(j)
		return owner != nil && owner.Kind == infrav1.MachineKind.Kind && owner.Name == machine && jobs.OpOf(j) == jobs.OpDestroy && jobs.OutcomeOf(j).Succeeded()
	})
	if destroy == nil {
		t.Fatalf("no successful destroy Job of the TerraformMachine %s was seen", machine)
	}
	s.Eventually("Cluster API deletes the Machine's Node", time.Minute, func(ctx context.Context) (bool, error) {
		err := s.C.Get(ctx, client.ObjectKey{Name: victim.Status.NodeRef.Name}, &corev1.Node{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

// replaced waits until the MachineDeployment is back at two ready machines, the victim's
// replacement among them with a provider ID of its own and its Node, each on a provisioned
// TerraformMachine.
func replaced(t *testing.T, s *system.Suite, md *clusterv1.MachineDeployment, victim *clusterv1.Machine) {
	t.Helper()
	s.Eventually("a replacement is provisioned and the MachineDeployment has two ready machines", 3*time.Minute, func(ctx context.Context) (bool, error) {
		if err := s.C.Get(ctx, client.ObjectKeyFromObject(md), md); err != nil {
			return false, err
		}
		return ptr.Deref(md.Status.ReadyReplicas, 0) == 2, nil
	})
	machines := workers(t, s, md)
	if len(machines) != 2 {
		t.Fatalf("%d workers, want 2", len(machines))
	}
	for _, m := range machines {
		if m.Name == victim.Name || m.Spec.ProviderID == victim.Spec.ProviderID || m.Spec.ProviderID != "local://"+m.Name || !m.Status.NodeRef.IsDefined() {
			t.Errorf("worker %s: provider ID %q, Node %q; the victim was %s (%s)", m.Name, m.Spec.ProviderID, m.Status.NodeRef.Name, victim.Name, victim.Spec.ProviderID)
		}
		var tm infrav1.TerraformMachine
		if err := s.C.Get(s.Ctx, client.ObjectKey{Namespace: s.NS, Name: m.Spec.InfrastructureRef.Name}, &tm); err != nil {
			t.Fatal(err)
		}
		if !tm.Status.IsProvisioned() || tm.Spec.ProviderID != m.Spec.ProviderID {
			t.Errorf("the TerraformMachine %s: provisioned %v, provider ID %q", tm.Name, tm.Status.IsProvisioned(), tm.Spec.ProviderID)
		}
	}
}

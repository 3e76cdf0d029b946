package nodeagent

import (
	"context"
	"fmt"
	"os"
	goruntime "runtime"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientretry "k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// Labels and facts of the Node.
const (
	// NodeLabel marks Nodes registered by the node agent.
	NodeLabel = "nodeagent.captf.io/local"
	// NodeTaintKey is the key of the NoSchedule taint (value "true") on the agent's Node, so
	// that a scheduler never places a pod there: the agent binds the pods it runs itself, and
	// a pod that lands on its Node runs on the host without isolation.
	NodeTaintKey = "captf.io/local-node"
	// leaseNamespace holds the node heartbeat Leases.
	leaseNamespace = corev1.NamespaceNodeLease
	// leaseDurationSeconds is how long a heartbeat counts, as the kubelet's default.
	leaseDurationSeconds = 40
	// agentVersion stands where a kubelet reports its version.
	agentVersion = "captf-nodeagent"
)

// nodeConditions are the Node's conditions; ready tells the Ready condition.
func (a *Agent) nodeConditions(ready bool, now metav1.Time) []corev1.NodeCondition {
	readyCond := corev1.NodeCondition{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "NodeAgentReady",
		Message: "the captf node agent is running pods as local processes",
	}
	if !ready {
		readyCond.Status, readyCond.Reason, readyCond.Message = corev1.ConditionFalse, "NodeAgentStopped", "the captf node agent stopped"
	}
	conds := []corev1.NodeCondition{readyCond}
	for _, t := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		conds = append(conds, corev1.NodeCondition{Type: t, Status: corev1.ConditionFalse, Reason: "NodeAgentHasNo" + string(t)})
	}
	for i := range conds {
		conds[i].LastHeartbeatTime = now
		conds[i].LastTransitionTime = now
	}
	return conds
}

func (a *Agent) nodeStatus(ready bool) corev1.NodeStatus {
	hostname, _ := os.Hostname()
	addresses := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodeIP}}
	if hostname != "" {
		addresses = append(addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: hostname})
	}
	return corev1.NodeStatus{
		Capacity:    a.cfg.Capacity.DeepCopy(),
		Allocatable: a.cfg.Capacity.DeepCopy(),
		Phase:       corev1.NodeRunning,
		Conditions:  a.nodeConditions(ready, metav1.Now()),
		Addresses:   addresses,
		// The API server asks the "kubelet" here for pods/log.
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: a.logsPort}},
		NodeInfo: corev1.NodeSystemInfo{
			OperatingSystem:         goruntime.GOOS,
			Architecture:            goruntime.GOARCH,
			KubeletVersion:          agentVersion,
			ContainerRuntimeVersion: "local-process://" + agentVersion,
		},
	}
}

// registerNode creates the Node, or takes over one left by an earlier run, and reports it
// Ready. It also writes the first heartbeat Lease.
func (a *Agent) registerNode(ctx context.Context) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: a.cfg.NodeName,
			Labels: map[string]string{
				corev1.LabelHostname:   a.cfg.NodeName,
				corev1.LabelOSStable:   goruntime.GOOS,
				corev1.LabelArchStable: goruntime.GOARCH,
				NodeLabel:              "true",
			},
		},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{nodeTaint}},
		// Nodes may carry their status on create.
		Status: a.nodeStatus(true),
	}
	_, err := a.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		err = a.adoptNode(ctx)
	}
	if err != nil {
		return err
	}
	a.renewLease(ctx)
	return nil
}

// nodeTaint keeps schedulers away from the agent's Node.
var nodeTaint = corev1.Taint{Key: NodeTaintKey, Value: "true", Effect: corev1.TaintEffectNoSchedule}

// adoptNode takes over a Node of the agent's name left by an earlier run (or made by someone
// else): it gets the agent's label and taint, then its status.
func (a *Agent) adoptNode(ctx context.Context) error {
	err := clientretry.RetryOnConflict(clientretry.DefaultRetry, func() error {
		node, err := a.client.CoreV1().Nodes().Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		tainted := slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.MatchTaint(&nodeTaint) && t.Value == nodeTaint.Value })
		if tainted && node.Labels[NodeLabel] == "true" {
			return nil
		}
		if !tainted {
			node.Spec.Taints = append(slices.DeleteFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.MatchTaint(&nodeTaint) }), nodeTaint)
		}
		if node.Labels == nil {
			node.Labels = map[string]string{}
		}
		node.Labels[NodeLabel] = "true"
		_, err = a.client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return err
	}
	return a.updateNodeStatus(ctx, true)
}

// updateNodeStatus writes the Node's status; a Node deleted meanwhile is created again.
func (a *Agent) updateNodeStatus(ctx context.Context, ready bool) error {
	node, err := a.client.CoreV1().Nodes().Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && ready {
		return a.registerNode(ctx)
	}
	if err != nil {
		return err
	}
	status := a.nodeStatus(ready)
	for i, c := range status.Conditions {
		for _, old := range node.Status.Conditions {
			if old.Type == c.Type && old.Status == c.Status && !old.LastTransitionTime.IsZero() {
				status.Conditions[i].LastTransitionTime = old.LastTransitionTime
			}
		}
	}
	node.Status = status
	_, err = a.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	return err
}

// heartbeat renews the node Lease and refreshes the Node's conditions until ctx is done.
func (a *Agent) heartbeat(ctx context.Context) {
	lease := time.NewTicker(a.cfg.HeartbeatInterval)
	defer lease.Stop()
	status := time.NewTicker(a.cfg.NodeStatusInterval)
	defer status.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-lease.C:
			a.renewLease(ctx)
		case <-status.C:
			if err := a.updateNodeStatus(ctx, true); err != nil && ctx.Err() == nil {
				a.log.Error(err, "updating node status")
			}
		}
	}
}

// renewLease writes the node heartbeat Lease in kube-node-lease, owned by the Node.
func (a *Agent) renewLease(ctx context.Context) {
	if err := a.tryRenewLease(ctx); err != nil && ctx.Err() == nil {
		a.log.Error(err, "renewing the node lease")
	}
}

func (a *Agent) tryRenewLease(ctx context.Context) error {
	leases := a.client.CoordinationV1().Leases(leaseNamespace)
	now := metav1.NewMicroTime(time.Now())
	lease, err := leases.Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, err := a.client.CoreV1().Nodes().Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading the node: %w", err)
		}
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name: a.cfg.NodeName, Namespace: leaseNamespace,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}},
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(a.cfg.NodeName),
				LeaseDurationSeconds: ptr.To[int32](leaseDurationSeconds),
				RenewTime:            &now,
			},
		}
		_, err = leases.Create(ctx, lease, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	lease.Spec.HolderIdentity = ptr.To(a.cfg.NodeName)
	lease.Spec.LeaseDurationSeconds = ptr.To[int32](leaseDurationSeconds)
	lease.Spec.RenewTime = &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}

// markNodeStopped reports the Node not ready after the agent stopped, so nobody waits on it; a
// best effort, since the agent is going away.
func (a *Agent) markNodeStopped() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.updateNodeStatus(ctx, false); err != nil {
		a.log.Error(err, "marking the node not ready")
	}
}

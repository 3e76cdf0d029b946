package capitest

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Local nodes stand in for the kubelets of machines that boot nothing (the sample module's):
// where the local kube-apiserver is the workload cluster, a Node with the Machine's provider ID
// is what Cluster API reads to give the Machine its nodeRef, its NodeHealthy condition and, with
// a MachineHealthCheck, its health.

// NodeName is the name of the Node of a provider ID: what follows the scheme's "://", as the
// sample module names its machines (local://<machine>).
func NodeName(providerID string) string {
	if _, name, ok := strings.Cut(providerID, "://"); ok {
		return strings.ReplaceAll(name, "/", "-")
	}
	return providerID
}

// LocalNode is the Node a machine's kubelet registers: named after the provider ID, carrying
// it, and reporting Ready without memory, disk or PID pressure, as a healthy kubelet of the
// version does.
func LocalNode(providerID, kubeletVersion string) *corev1.Node {
	now := metav1.Now()
	condition := func(t corev1.NodeConditionType, status corev1.ConditionStatus, reason string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: status, Reason: reason, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: NodeName(providerID)},
		Spec:       corev1.NodeSpec{ProviderID: providerID},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{
				condition(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady"),
				condition(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory"),
				condition(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure"),
				condition(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID"),
			},
			NodeInfo: corev1.NodeSystemInfo{KubeletVersion: kubeletVersion},
		},
	}
}

// RegisterNode creates the LocalNode of a provider ID, its status written through the status
// subresource as a kubelet's is, and returns it (also when only its status failed).
func RegisterNode(ctx context.Context, c client.Client, providerID, kubeletVersion string) (*corev1.Node, error) {
	node := LocalNode(providerID, kubeletVersion)
	status := node.Status
	if err := c.Create(ctx, node); err != nil {
		return nil, fmt.Errorf("registering the Node of %s: %w", providerID, err)
	}
	node.Status = status
	if err := c.Status().Update(ctx, node); err != nil {
		return node, fmt.Errorf("reporting the Node %s Ready: %w", node.Name, err)
	}
	return node, nil
}

// NudgeAnnotation is the annotation RunLocalNodes touches on a Machine whose Node Cluster API
// has not linked yet.
const NudgeAnnotation = "test.captf.io/nudge"

// nudgeAfter is how long RunLocalNodes waits for Cluster API to link a Node before it nudges.
const nudgeAfter = 5 * time.Second

// RunLocalNodes registers a Node (RegisterNode) for every Machine of the namespace that has a
// provider ID and is not being deleted, and for every provider ID of a MachinePool's list, once
// per provider ID, as the machine's kubelet would on joining, until ctx ends; then it deletes
// the Nodes it registered that are left and returns the first error it met, if any. It never
// changes a Node it registered, so a test may make one unhealthy, and never registers one again
// after Cluster API deleted it with its Machine.
//
// Cluster API maps a new Node to its Machine through its cached provider IDs, so a Node made
// just as the Machine's provider ID lands can go unseen until its next resync, minutes later:
// a Machine still without its nodeRef some seconds after its Node was made is touched
// (NudgeAnnotation), which has Cluster API look again.
func RunLocalNodes(ctx context.Context, c client.Client, namespace string) error {
	l := &localNodes{c: c, namespace: namespace, registered: map[string]time.Time{}, nudged: map[string]time.Time{}, created: map[string]bool{}}
	defer func() {
		for name := range l.created {
			_ = c.Delete(context.WithoutCancel(ctx), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		}
	}()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	var first error
	for {
		// A failed look is tried again at the next tick: a test waiting for a Node says more
		// than a stand-in that stopped at the first error would.
		if err := l.look(ctx); err != nil && ctx.Err() == nil && first == nil {
			first = err
		}
		select {
		case <-ctx.Done():
			return first
		case <-tick.C:
		}
	}
}

// localNodes is what RunLocalNodes knows: when it registered each provider ID's Node and last
// nudged its Machine, and the Nodes it created (a Node that existed is left alone).
type localNodes struct {
	c                  client.Client
	namespace          string
	registered, nudged map[string]time.Time
	created            map[string]bool
}

// look registers and nudges once over the namespace's Machines.
func (l *localNodes) look(ctx context.Context) error {
	var machines clusterv1.MachineList
	if err := l.c.List(ctx, &machines, client.InNamespace(l.namespace)); err != nil {
		return fmt.Errorf("listing Machines: %w", err)
	}
	now := time.Now()
	for i := range machines.Items {
		m := &machines.Items[i]
		id := m.Spec.ProviderID
		if id == "" || !m.DeletionTimestamp.IsZero() {
			continue
		}
		at, ok := l.registered[id]
		switch {
		case !ok:
			if err := l.register(ctx, id, m.Spec.Version, now); err != nil {
				return err
			}
		case !m.Status.NodeRef.IsDefined() && now.Sub(at) > nudgeAfter && now.Sub(l.nudged[id]) > nudgeAfter:
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, NudgeAnnotation, now.Format(time.RFC3339Nano))
			if err := l.c.Patch(ctx, m, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("nudging Machine %s: %w", m.Name, err)
			}
			l.nudged[id] = now
		}
	}
	// Pools after machines: a cluster without the MachinePool kind still gets its Machines' Nodes.
	return l.registerPoolMembers(ctx)
}

// register registers the Node of a provider ID.
func (l *localNodes) register(ctx context.Context, id, version string, now time.Time) error {
	node, err := RegisterNode(ctx, l.c, id, version)
	if node != nil {
		l.created[node.Name] = true
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	l.registered[id] = now
	return nil
}

// registerPoolMembers registers the Nodes of the namespace's MachinePools' members: Cluster
// API gives a pool its nodeRefs from the Nodes whose provider IDs its list names.
func (l *localNodes) registerPoolMembers(ctx context.Context) error {
	var pools clusterv1.MachinePoolList
	if err := l.c.List(ctx, &pools, client.InNamespace(l.namespace)); err != nil {
		return fmt.Errorf("listing MachinePools: %w", err)
	}
	for i := range pools.Items {
		mp := &pools.Items[i]
		if !mp.DeletionTimestamp.IsZero() {
			continue
		}
		for _, id := range mp.Spec.ProviderIDList {
			if _, ok := l.registered[id]; ok {
				continue
			}
			if err := l.register(ctx, id, mp.Spec.Template.Spec.Version, time.Now()); err != nil {
				return err
			}
		}
	}
	return nil
}

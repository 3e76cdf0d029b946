package nodeagent_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/captf/captf/test/nodeagent"
)

// The agent's Node carries a NoSchedule taint, so a scheduler never places a pod there (the
// agent binds its own pods regardless): on a Node it registers and on one it takes over.
func TestNodeIsTaintedAgainstSchedulers(t *testing.T) {
	for _, rule := range []struct {
		name string
		// before runs ahead of the agent's start.
		before func(f *fixture)
	}{
		{"a Node the agent registers", func(*fixture) {}},
		{"a Node the agent takes over", func(f *fixture) {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: f.cfg.NodeName}, Spec: corev1.NodeSpec{
				Taints: []corev1.Taint{{Key: "other", Value: "x", Effect: corev1.TaintEffectPreferNoSchedule}},
			}}
			if _, err := f.client.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(rule.name, func(t *testing.T) {
			f := newNamespace(t, nil)
			rule.before(f)
			f.start()
			t.Cleanup(f.stop)
			node, err := f.client.CoreV1().Nodes().Get(context.Background(), f.cfg.NodeName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			tainted := false
			for _, taint := range node.Spec.Taints {
				if taint.Key == nodeagent.NodeTaintKey && taint.Value == "true" && taint.Effect == corev1.TaintEffectNoSchedule {
					tainted = true
				}
			}
			if !tainted || node.Labels[nodeagent.NodeLabel] != "true" {
				t.Errorf("node taints %v, labels %v", node.Spec.Taints, node.Labels)
			}
			// The agent still runs the pods it binds.
			f.createPod("runs", podSpec(container("main", "--to=/dev/termination-log", "--print=ran")))
			f.waitPhase("runs", corev1.PodSucceeded, 30*time.Second)
		})
	}
}

package workspace_test

import (
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
)

// withHealth is contractOutputs with the health output's state and healthy flag.
func withHealth(state string, healthy bool) string {
	h := `"state":"` + state + `","healthy":false`
	if healthy {
		h = `"state":"` + state + `","healthy":true`
	}
	return strings.Replace(contractOutputs, `"state":"running","healthy":true`, h, 1)
}

// machineAnnotations returns the annotations of the Machine of the same name.
func (h *harness) machineAnnotations(name string) map[string]string {
	h.t.Helper()
	var m clusterv1.Machine
	if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: name}, &m); err != nil {
		h.t.Fatal(err)
	}
	return m.Annotations
}

// A machine with spec.remediation.annotateMachine asks Cluster API to replace it by annotating
// its Machine (cluster.x-k8s.io/remediate-machine), from the health its state reports: at once
// when terminated, after unhealthyThreshold unhealthy readings in a row otherwise; it withdraws
// only its own request, once healthy again.
func TestAMachineAsksClusterAPIToReplaceIt(t *testing.T) {
	newMachine := func(h *harness, remediation infrav1.MachineRemediationSpec) *infrav1.TerraformMachine {
		tm := &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: "m1", Namespace: h.ns},
			Spec: infrav1.TerraformMachineSpec{
				WorkspaceSpec: infrav1.WorkspaceSpec{Source: infrav1.SourceSpec{Image: image}, Variables: &apiextensionsv1.JSON{Raw: []byte(`{}`)}},
				Remediation:   remediation,
			}}
		h.create(tm)
		h.settle(tm)
		return tm
	}
	annotate := infrav1.MachineRemediationSpec{AnnotateMachine: true}
	requested := func(h *harness) bool {
		_, ok := h.machineAnnotations("m1")[clusterv1.RemediateMachineAnnotation]
		return ok
	}

	t.Run("a terminated machine asks for its replacement at once", func(t *testing.T) {
		h := newHarness(t, jobs.KindMachine)
		tm := newMachine(h, annotate)
		h.runWith(tm, jobs.OpApply, 1, contractOutputs)
		h.runWith(tm, jobs.OpRefresh, 2, withHealth("terminated", false))
		if !requested(h) || h.machineAnnotations("m1")[workspace.AnnotationRemediationRequested] == "" {
			t.Fatalf("Machine annotations = %v, want the remediation request", h.machineAnnotations("m1"))
		}
		wantCond(t, tm, conditions.Ready, metav1.ConditionFalse, conditions.ReasonInstanceTerminated)
		if ev := h.events(); countPrefix(ev, "Warning RemediationRequested") != 1 {
			t.Errorf("want one RemediationRequested event: %v", ev)
		}
	})

	t.Run("without annotateMachine the Machine is never annotated, and Ready says it", func(t *testing.T) {
		h := newHarness(t, jobs.KindMachine)
		tm := newMachine(h, infrav1.MachineRemediationSpec{})
		h.runWith(tm, jobs.OpApply, 1, contractOutputs)
		h.runWith(tm, jobs.OpRefresh, 2, withHealth("terminated", false))
		if requested(h) {
			t.Fatalf("Machine annotations = %v", h.machineAnnotations("m1"))
		}
		wantCond(t, tm, conditions.Ready, metav1.ConditionFalse, conditions.ReasonInstanceTerminated)
	})

	t.Run("unhealthy readings up to the threshold ask for its replacement", func(t *testing.T) {
		h := newHarness(t, jobs.KindMachine)
		tm := newMachine(h, infrav1.MachineRemediationSpec{AnnotateMachine: true, UnhealthyThreshold: ptr.To[int32](3), HealthCheckIntervalSeconds: ptr.To[int64](60)})
		h.runWith(tm, jobs.OpApply, 1, withHealth("degraded", false))
		h.runWith(tm, jobs.OpRefresh, 2, withHealth("degraded", false))
		if requested(h) || tm.Status.UnhealthySamples != 2 {
			t.Fatalf("after 2 readings: unhealthySamples %d, annotations %v", tm.Status.UnhealthySamples, h.machineAnnotations("m1"))
		}
		// The health check interval passes: a refresh reads the health once more.
		h.clock.SetTime(h.clock.Now().Add(time.Minute))
		h.settle(tm)
		h.runWith(tm, jobs.OpRefresh, 3, withHealth("running", false))
		if !requested(h) || tm.Status.UnhealthySamples != 3 {
			t.Fatalf("after 3 readings: unhealthySamples %d, annotations %v", tm.Status.UnhealthySamples, h.machineAnnotations("m1"))
		}
	})

	t.Run("a healthy reading resets the count", func(t *testing.T) {
		h := newHarness(t, jobs.KindMachine)
		tm := newMachine(h, infrav1.MachineRemediationSpec{AnnotateMachine: true, UnhealthyThreshold: ptr.To[int32](2)})
		h.runWith(tm, jobs.OpApply, 1, withHealth("stopped", false))
		h.clock.SetTime(h.clock.Now().Add(time.Minute))
		h.runWith(tm, jobs.OpRefresh, 2, contractOutputs)
		if requested(h) || tm.Status.UnhealthySamples != 0 {
			t.Fatalf("unhealthySamples %d, annotations %v", tm.Status.UnhealthySamples, h.machineAnnotations("m1"))
		}
	})

	t.Run("a provisioned machine that loses its provider ID is ProviderIDMissing, then terminated at the next reading", func(t *testing.T) {
		h := newHarness(t, jobs.KindMachine)
		tm := newMachine(h, infrav1.MachineRemediationSpec{AnnotateMachine: true, HealthCheckIntervalSeconds: ptr.To[int64](60)})
		h.runWith(tm, jobs.OpApply, 1, contractOutputs)
		gone := strings.Replace(contractOutputs, `"provider_id":"test:///m-1"`, `"provider_id":null`, 1)
		h.runWith(tm, jobs.OpRefresh, 2, gone)
		wantCond(t, tm, conditions.InfrastructureHealthy, metav1.ConditionUnknown, conditions.ReasonProviderIDMissing)
		wantCond(t, tm, conditions.Ready, metav1.ConditionUnknown, conditions.ReasonProviderIDMissing)
		if requested(h) {
			t.Fatal("one reading without a provider ID asked for a replacement")
		}
		h.clock.SetTime(h.clock.Now().Add(time.Minute))
		h.settle(tm)
		h.runWith(tm, jobs.OpRefresh, 3, gone)
		wantCond(t, tm, conditions.Ready, metav1.ConditionFalse, conditions.ReasonInstanceTerminated)
		if !requested(h) {
			t.Fatalf("Machine annotations = %v, want the remediation request", h.machineAnnotations("m1"))
		}
	})

	t.Run("the request is withdrawn once healthy, and only captf's own", func(t *testing.T) {
		h := newHarness(t, jobs.KindMachine)
		tm := newMachine(h, annotate)
		h.runWith(tm, jobs.OpApply, 1, contractOutputs)
		h.runWith(tm, jobs.OpRefresh, 2, withHealth("terminated", false))
		if !requested(h) {
			t.Fatal("no request to withdraw")
		}
		h.writeStateWith(jobs.KindMachine, tm.Name, 1, 3, contractOutputs)
		h.settle(tm)
		if requested(h) || h.machineAnnotations("m1")[workspace.AnnotationRemediationRequested] != "" {
			t.Fatalf("Machine annotations = %v, want the request withdrawn", h.machineAnnotations("m1"))
		}

		// Someone else's request stays.
		var m clusterv1.Machine
		if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: "m1"}, &m); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(m.DeepCopy())
		m.Annotations = map[string]string{clusterv1.RemediateMachineAnnotation: ""}
		if err := h.c.Patch(h.ctx, &m, patch); err != nil {
			t.Fatal(err)
		}
		h.writeStateWith(jobs.KindMachine, tm.Name, 1, 4, contractOutputs)
		h.settle(tm)
		if !requested(h) {
			t.Fatalf("Machine annotations = %v: captf withdrew a request it did not make", h.machineAnnotations("m1"))
		}
	})
}

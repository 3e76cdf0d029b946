package workspace_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/jobs"
)

// TestReadyFollowsTheHealthOnceProvisioned: Cluster API mirrors Ready into InfrastructureReady,
// which MachineHealthChecks read, so once provisioned Ready is the infrastructure's health and
// not the newest run.
func TestReadyFollowsTheHealthOnceProvisioned(t *testing.T) {
	terminated := strings.Replace(contractOutputs, `"state":"running","healthy":true`, `"state":"terminated","healthy":false`, 1)
	for _, tc := range []struct {
		rule       string
		after      func(h *harness, obj *infrav1.TerraformCluster)
		wantApply  metav1.ConditionStatus
		wantReady  metav1.ConditionStatus
		wantReason string
	}{
		{
			rule: "a failed re-apply leaves a provisioned cluster Ready",
			after: func(h *harness, obj *infrav1.TerraformCluster) {
				h.patchVariables(obj, `{"release":"two"}`)
				h.settle(obj)
				h.finish(h.runningJob(jobs.KindCluster, obj.Name), jobs.OutcomeFailed, &jobs.RunnerResult{Error: &jobs.RunnerError{Kind: jobs.ErrorKindStep, Step: "apply", Tail: "Error: boom"}})
				h.settle(obj)
			},
			wantApply: metav1.ConditionFalse, wantReady: metav1.ConditionTrue, wantReason: conditions.ReasonReady,
		},
		{
			rule: "a terminated instance makes a provisioned cluster not Ready, with InstanceTerminated",
			after: func(h *harness, obj *infrav1.TerraformCluster) {
				h.writeStateWith(jobs.KindCluster, obj.Name, 2, 2, terminated)
				h.settle(obj)
			},
			wantApply: metav1.ConditionTrue, wantReady: metav1.ConditionFalse, wantReason: conditions.ReasonInstanceTerminated,
		},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			h := newHarness(t, jobs.KindCluster)
			obj := h.cluster("web")
			h.settle(obj)
			h.writeState(jobs.KindCluster, "web", 2)
			h.finish(h.runningJob(jobs.KindCluster, "web"), jobs.OutcomeSucceeded, &jobs.RunnerResult{Changes: &jobs.Changes{Add: 2}})
			h.settle(obj)
			h.get(obj)
			if !obj.Status.IsProvisioned() || !conditions.IsTrue(obj.Status.Conditions, conditions.Ready) {
				t.Fatalf("not provisioned and Ready after the first apply: %+v", obj.Status.Conditions)
			}

			tc.after(h, obj)

			h.get(obj)
			if c := conditions.Get(obj.Status.Conditions, conditions.ApplyJobSucceeded); c == nil || c.Status != tc.wantApply {
				t.Errorf("ApplyJobSucceeded = %+v, want %s", c, tc.wantApply)
			}
			if r := conditions.Get(obj.Status.Conditions, conditions.Ready); r == nil || r.Status != tc.wantReady || r.Reason != tc.wantReason {
				t.Errorf("Ready = %+v, want %s/%s", r, tc.wantReady, tc.wantReason)
			}
		})
	}
}

// patchVariables merges variables into the object's spec.variables.
func (h *harness) patchVariables(obj client.Object, variables string) {
	h.t.Helper()
	if err := h.c.Patch(h.ctx, obj, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"variables":`+variables+`}}`))); err != nil {
		h.t.Fatal(err)
	}
}

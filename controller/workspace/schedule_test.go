package workspace_test

import (
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/jobs"
)

func TestInputsBeyondTheLimitStartNoJob(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.cluster("web", func(c *infrav1.TerraformCluster) {
		c.Spec.Variables = &apiextensionsv1.JSON{Raw: []byte(`{"blob":"` + strings.Repeat("x", 1_000_000) + `"}`)}
	})
	h.settle(tc)
	if n := len(h.jobs(jobs.KindCluster, "web")); n != 0 {
		t.Fatalf("%d Jobs", n)
	}
	h.get(tc)
	if c := conditions.Get(tc.Status.Conditions, conditions.ApplyJobSucceeded); c == nil || c.Status != metav1.ConditionFalse || c.Reason != conditions.ReasonInputsTooLarge {
		t.Fatalf("ApplyJobSucceeded = %+v", c)
	}
}

func TestMachineRefreshesAfterApplyThenChecksDrift(t *testing.T) {
	h := newHarness(t, jobs.KindMachine)
	m := &infrav1.TerraformMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "m1", Namespace: h.ns},
		Spec: infrav1.TerraformMachineSpec{
			WorkspaceSpec: infrav1.WorkspaceSpec{Source: infrav1.SourceSpec{Image: image}},
			Drift:         infrav1.MachineDriftSpec{IntervalSeconds: ptr.To[int64](600)},
		},
	}
	h.create(m)
	h.settle(m)
	apply := h.runningJob(jobs.KindMachine, "m1")
	h.writeState(jobs.KindMachine, "m1", 1)
	h.finish(apply, jobs.OutcomeSucceeded, nil)
	h.settle(m)

	refresh := h.runningJob(jobs.KindMachine, "m1")
	if jobs.OpOf(&refresh) != jobs.OpRefresh {
		t.Fatalf("after the apply: %s, want a refresh", jobs.OpOf(&refresh))
	}
	h.finish(refresh, jobs.OutcomeSucceeded, nil)
	h.settle(m)
	for _, j := range h.jobs(jobs.KindMachine, "m1") {
		if !jobs.OutcomeOf(&j).Finished() {
			t.Fatalf("%s started before the drift interval", j.Name)
		}
	}

	h.clock.SetTime(h.clock.Now().Add(11 * time.Minute))
	h.settle(m)
	drift := h.runningJob(jobs.KindMachine, "m1")
	if jobs.OpOf(&drift) != jobs.OpDrift {
		t.Fatalf("after the interval: %s, want a drift check", jobs.OpOf(&drift))
	}
	h.finish(drift, jobs.OutcomeSucceeded, &jobs.RunnerResult{Drift: &jobs.RunnerDrift{Detected: true, Counts: jobs.Counts{Change: 1}}})
	h.settle(m)
	h.get(m)
	if c := conditions.Get(m.Status.Conditions, conditions.DriftDetected); c == nil || c.Status != metav1.ConditionTrue || c.Reason != conditions.ReasonDriftReported {
		t.Fatalf("DriftDetected = %+v", c)
	}
	if m.Status.LastDriftCheck == nil || m.Status.LastRefresh == nil {
		t.Fatalf("status = %+v", m.Status)
	}

	// A machine's changed inputs are never applied once provisioned.
	h.get(m)
	m.Spec.Jobs.FailedJobsHistoryLimit = ptr.To[int32](2)
	if err := h.c.Update(h.ctx, m); err != nil {
		t.Fatal(err)
	}
	h.settle(m)
	for _, j := range h.jobs(jobs.KindMachine, "m1") {
		if !jobs.OutcomeOf(&j).Finished() {
			t.Fatalf("%s started for a converged machine", j.Name)
		}
	}
}

// A pool reads its members again on its own period, sooner while its provider IDs and replicas
// disagree, whether or not drift checks run.
func TestAPoolRefreshesItsMembersOnItsPeriod(t *testing.T) {
	h := newHarness(t, jobs.KindMachinePool)
	p := &infrav1.TerraformMachinePool{
		ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: h.ns},
		Spec: infrav1.TerraformMachinePoolSpec{
			WorkspaceSpec:                    infrav1.WorkspaceSpec{Source: infrav1.SourceSpec{Image: image}},
			Drift:                            infrav1.DriftSpec{IntervalSeconds: ptr.To[int64](0)},
			MembershipRefreshIntervalSeconds: ptr.To[int32](300),
		},
	}
	h.create(p)
	h.settle(p)
	h.writeState(jobs.KindMachinePool, "p1", 1)
	h.finish(h.runningJob(jobs.KindMachinePool, "p1"), jobs.OutcomeSucceeded, nil)
	h.settle(p)
	refresh := h.runningJob(jobs.KindMachinePool, "p1")
	if jobs.OpOf(&refresh) != jobs.OpRefresh {
		t.Fatalf("after the apply: %s, want a refresh", jobs.OpOf(&refresh))
	}
	h.finish(refresh, jobs.OutcomeSucceeded, nil)
	// The harness's state has one provider ID and one replica: the membership has converged.
	res := h.settle(p)
	if res.RequeueAfter <= 0 || res.RequeueAfter > 5*time.Minute {
		t.Fatalf("next look in %s, want within the 5-minute period", res.RequeueAfter)
	}
	h.clock.SetTime(h.clock.Now().Add(5*time.Minute + time.Second))
	h.settle(p)
	again := h.runningJob(jobs.KindMachinePool, "p1")
	if jobs.OpOf(&again) != jobs.OpRefresh || again.Name == refresh.Name {
		t.Fatalf("after the period: %s %s, want a new refresh", jobs.OpOf(&again), again.Name)
	}
}

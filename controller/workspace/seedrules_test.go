package workspace_test

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/jobs"
)

// Rules of the run inputs and the plan key that are stated once and checked here against the
// real API server.

// TestAnImageChangeClearsThePin: a digest pins the image it was pulled for; a new image
// reference drops it when its apply starts, and the next successful apply pins again.
func TestAnImageChangeClearsThePin(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	h.tagDigest[image] = digestOld
	tc := h.provisioned(nil)
	if d := h.secret(jobs.InputsSecretName(jobs.KindCluster, "web")); d.Annotations[jobs.AnnotationImageDigest] != digestOld {
		t.Fatalf("no pin after the first apply: %v", d.Annotations)
	}
	const moved = "registry.example/modules/net:v2"
	tc.Spec.Source.Image = moved
	if err := h.c.Update(h.ctx, tc); err != nil {
		t.Fatal(err)
	}
	h.settle(tc)
	apply := h.runningJob(jobs.KindCluster, "web")
	d := h.secret(jobs.InputsSecretName(jobs.KindCluster, "web"))
	if jobs.OpOf(&apply) != jobs.OpApply || d.Annotations[jobs.AnnotationImage] != moved {
		t.Fatalf("%s running, durable image %q", jobs.OpOf(&apply), d.Annotations[jobs.AnnotationImage])
	}
	if digest, pinned := d.Annotations[jobs.AnnotationImageDigest]; pinned {
		t.Fatalf("the old image's digest %s stayed pinned for %s", digest, moved)
	}
	h.tagDigest[moved] = digestNew
	h.finish(apply, jobs.OutcomeSucceeded, nil)
	h.settle(tc)
	if d := h.secret(jobs.InputsSecretName(jobs.KindCluster, "web")); d.Annotations[jobs.AnnotationImageDigest] != digestNew {
		t.Fatalf("the new apply pinned %q, want %s", d.Annotations[jobs.AnnotationImageDigest], digestNew)
	}
}

// TestThePlanKeyIsNeverRotated: a plan hash stays valid for the object's life, so the key made
// for its first plan is the key of every later one.
func TestThePlanKeyIsNeverRotated(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc, key, hash := planWaiting(h, planA)
	first := h.secret(jobs.PlanKeySecretName(jobs.KindCluster, "web"))
	if first == nil {
		t.Fatal("no plan key after a plan")
	}
	h.annotate(tc, key, hash)
	h.settle(tc)
	h.finish(h.runningJob(jobs.KindCluster, "web"), jobs.OutcomeSucceeded, nil)
	h.settle(tc)
	h.get(tc)
	h.setVariables(tc, `{"region":"eu"}`)
	h.settle(tc)
	plan := h.runningJob(jobs.KindCluster, "web")
	if jobs.OpOf(&plan) != jobs.OpPlan || !mountsPlanKey(plan) {
		t.Fatalf("%s running, plan key mounted %v; want the second plan with the key", jobs.OpOf(&plan), mountsPlanKey(plan))
	}
	again := h.secret(jobs.PlanKeySecretName(jobs.KindCluster, "web"))
	if again == nil || again.UID != first.UID || string(again.Data["key"]) != string(first.Data["key"]) {
		t.Fatal("the plan key was made again")
	}
}

// TestThePlanKeyIsMountedOnlyOnPlansAndApprovedApplies: a guarded apply under Automatic, and
// drift, refresh and destroy Jobs, never see the key.
func TestThePlanKeyIsMountedOnlyOnPlansAndApprovedApplies(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.cluster("web", func(c *infrav1.TerraformCluster) {
		c.Spec.Drift = infrav1.DriftSpec{IntervalSeconds: ptr.To[int64](600)}
	})
	h.settle(tc)
	seen := map[jobs.Op]bool{}
	check := func() batchv1.Job {
		t.Helper()
		j := h.runningJob(jobs.KindCluster, "web")
		if mountsPlanKey(j) {
			t.Fatalf("%s Job %s mounts the plan key", jobs.OpOf(&j), j.Name)
		}
		seen[jobs.OpOf(&j)] = true
		return j
	}
	apply := check()
	if !hasArg(apply, "--guard-deletes") {
		t.Fatalf("the apply is not guarded: %q", command(apply))
	}
	h.writeState(jobs.KindCluster, "web", 1)
	h.finish(apply, jobs.OutcomeSucceeded, nil)
	h.settle(tc)
	for range 3 {
		if j, running := h.maybeRunning(jobs.KindCluster, "web"); running {
			_ = check()
			h.finish(j, jobs.OutcomeSucceeded, nil)
			h.settle(tc)
			continue
		}
		h.clock.SetTime(h.clock.Now().Add(11 * time.Minute))
		h.settle(tc)
	}
	if !seen[jobs.OpDrift] {
		t.Fatalf("no drift Job ran: %v", seen)
	}
	if j, running := h.maybeRunning(jobs.KindCluster, "web"); running {
		h.finish(j, jobs.OutcomeSucceeded, nil)
		h.settle(tc)
	}
	h.get(tc)
	if err := h.c.Delete(h.ctx, tc); err != nil {
		t.Fatal(err)
	}
	h.settle(tc)
	if destroy := check(); jobs.OpOf(&destroy) != jobs.OpDestroy {
		t.Fatalf("%s running, want the destroy", jobs.OpOf(&destroy))
	}
}

// TestAMachineWhoseRunningApplyIsDeletedRecordsNothing: a machine never applies again once
// provisioned, so an apply deleted while it ran leaves no interrupted-apply marker and no
// condition saying an apply is due.
func TestAMachineWhoseRunningApplyIsDeletedRecordsNothing(t *testing.T) {
	h := newHarness(t, jobs.KindMachine)
	m := machine(h, "m1")
	m.Labels = nil
	h.create(m)
	h.settle(m)
	running := h.runningJob(jobs.KindMachine, "m1")
	if jobs.OpOf(&running) != jobs.OpApply {
		t.Fatalf("%s running, want the apply", jobs.OpOf(&running))
	}
	if err := h.c.Delete(h.ctx, &running, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	h.events()
	h.reconcile(m)
	if d := h.secret(jobs.InputsSecretName(jobs.KindMachine, "m1")); d != nil && d.Annotations[jobs.AnnotationInterruptedApply] != "" {
		t.Fatalf("the machine's durable inputs record an interrupted apply: %v", d.Annotations)
	}
	if ev := h.events(); countPrefix(ev, "Warning JobInterrupted") != 0 {
		t.Errorf("events = %v", ev)
	}
}

// maybeRunning returns the object's one running Job, and whether there is one.
func (h *harness) maybeRunning(kind jobs.Kind, name string) (batchv1.Job, bool) {
	h.t.Helper()
	for _, j := range h.jobs(kind, name) {
		if !jobs.OutcomeOf(&j).Finished() {
			return h.runningJob(kind, name), true
		}
	}
	return batchv1.Job{}, false
}

// TestARefusedCreateLeavesTheDurableInputsAsTheLastApplyLeftThem: the durable inputs are
// written only once the apply's Job exists; a create the API server refuses (here a Job whose
// requests exceed its limits) changes neither the recorded inputs nor the pinned digest.
func TestARefusedCreateLeavesTheDurableInputsAsTheLastApplyLeftThem(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	h.tagDigest[image] = digestOld
	tc := h.provisioned(nil)
	before := h.secret(jobs.InputsSecretName(jobs.KindCluster, "web"))
	tc.Spec.Source.Image = "registry.example/modules/net:v2"
	tc.Spec.Jobs.Resources = &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
	}
	if err := h.c.Update(h.ctx, tc); err != nil {
		t.Fatal(err)
	}
	if _, err := h.r.Reconcile(h.ctx, requestFor(tc)); err == nil {
		t.Fatal("the pass reported no refused create")
	}
	h.get(tc)
	if c := conditions.Get(tc.Status.Conditions, conditions.ApplyJobSucceeded); c == nil || c.Reason != conditions.ReasonJobRejected {
		t.Fatalf("ApplyJobSucceeded = %+v, want %s", c, conditions.ReasonJobRejected)
	}
	after := h.secret(jobs.InputsSecretName(jobs.KindCluster, "web"))
	if after.ResourceVersion != before.ResourceVersion || after.Annotations[jobs.AnnotationImageDigest] != digestOld {
		t.Fatalf("the refused apply rewrote the durable inputs: %v", after.Annotations)
	}
}

package workspace_test

import (
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/inputs"
	"github.com/captf/captf/controller/jobspec"
	"github.com/captf/captf/jobs"
)

var (
	digestOld = "sha256:" + strings.Repeat("0", 64)
	digestNew = "sha256:" + strings.Repeat("1", 64)
)

func sourceImage(job batchv1.Job) string {
	for _, c := range job.Spec.Template.Spec.Containers {
		if c.Name == jobspec.SourceContainer {
			return c.Image
		}
	}
	return ""
}

func TestASuccessfulApplyPinsTheDigestItsPodRan(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	h.tagDigest[image] = digestOld
	tc := h.provisioned(nil)
	if d := h.secret(jobs.InputsSecretName(jobs.KindCluster, "web")); d.Annotations[jobs.AnnotationImageDigest] != digestOld || d.Annotations[jobs.AnnotationImage] != image {
		t.Fatalf("durable inputs annotations = %v", d.Annotations)
	}
	if s := tc.Status.Source; s == nil || s.Digest != digestOld || s.Image != image {
		t.Fatalf("status.source = %+v", s)
	}
	if ev := h.events(); countPrefix(ev, "Normal ImagePinned") != 1 {
		t.Errorf("events = %v", ev)
	}
}

func TestDestroyRunsThePinnedDigestNotTheTag(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	h.tagDigest[image] = digestOld
	tc := h.provisioned(nil)
	h.tagDigest[image] = digestNew // the tag is pushed again
	if err := h.c.Delete(h.ctx, tc); err != nil {
		t.Fatal(err)
	}
	h.events()
	h.settle(tc)
	destroy := h.runningJob(jobs.KindCluster, "web")
	if got, want := sourceImage(destroy), jobs.PinnedReference(image, digestOld); jobs.OpOf(&destroy) != jobs.OpDestroy || got != want {
		t.Fatalf("%s Job runs %q, want %q", jobs.OpOf(&destroy), got, want)
	}
	if ev := h.events(); countPrefix(ev, "Warning DigestUnknown") != 0 {
		t.Errorf("events = %v", ev)
	}
}

func TestWithoutAPinnedDigestARefreshRunsTheReferenceAndSaysSo(t *testing.T) {
	h := newHarness(t, jobs.KindMachine)
	m := &infrav1.TerraformMachine{}
	m.Name, m.Namespace = "web", h.ns
	m.Spec.Source.Image = image
	h.create(m)
	h.settle(m)
	apply := h.runningJob(jobs.KindMachine, "web")
	h.tagDigest[image] = "none" // the node reports no digest
	h.writeState(jobs.KindMachine, "web", 1)
	h.finish(apply, jobs.OutcomeSucceeded, nil)
	h.events()
	h.settle(m)
	refresh := h.runningJob(jobs.KindMachine, "web")
	if jobs.OpOf(&refresh) != jobs.OpRefresh || sourceImage(refresh) != image {
		t.Fatalf("%s Job runs %q, want the refresh to run %q", jobs.OpOf(&refresh), sourceImage(refresh), image)
	}
	if ev := h.events(); countPrefix(ev, "Warning DigestUnknown") != 1 {
		t.Errorf("events = %v", ev)
	}
}

func TestAnApprovedApplyRunsTheDigestItsPlanRan(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.provisioned(func(c *infrav1.TerraformCluster) { c.Spec.ApplyPolicy = infrav1.ApplyPolicyManual })
	h.setVariables(tc, `{"region":"us"}`)
	h.settle(tc)
	h.tagDigest[image] = digestOld
	h.finish(h.runningJob(jobs.KindCluster, "web"), jobs.OutcomeSucceeded, &jobs.RunnerResult{Plan: &jobs.RunnerPlan{Hash: planA}})
	h.settle(tc)
	// The tag is pushed again after the plan: the approval binds the code that planned.
	h.tagDigest[image] = digestNew
	h.annotate(tc, jobs.AnnotationApprovePlan, planA)
	h.settle(tc)
	apply := h.runningJob(jobs.KindCluster, "web")
	if got, want := sourceImage(apply), jobs.PinnedReference(image, digestOld); jobs.OpOf(&apply) != jobs.OpApply || got != want {
		t.Fatalf("%s Job runs %q, want the plan's %q", jobs.OpOf(&apply), got, want)
	}
}

func TestDestroyRunsTheDurableInputsNotTheCurrentOnes(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.provisioned(nil)
	applied := h.secret(jobs.InputsSecretName(jobs.KindCluster, "web")).Data
	h.setVariables(tc, `{"region":"us"}`)
	if err := h.c.Delete(h.ctx, tc); err != nil {
		t.Fatal(err)
	}
	h.settle(tc)
	destroy := h.runningJob(jobs.KindCluster, "web")
	run := h.secret(jobs.RunSecretName(destroy.Name))
	if jobs.OpOf(&destroy) != jobs.OpDestroy || run == nil {
		t.Fatalf("%s Job %s, per-run Secret %v", jobs.OpOf(&destroy), destroy.Name, run)
	}
	for _, key := range []string{inputs.MainFile, inputs.VarsFile} {
		if string(run.Data[key]) != string(applied[key]) {
			t.Errorf("the destroy's %s = %s, want the applied %s", key, run.Data[key], applied[key])
		}
	}
}

// TestAnApprovedApplyWithoutItsPlansDigestDoesNotStart: an approved apply never falls back to
// the mutable tag. When the digest its plan ran is unknown (the plan Job is gone, or its digest
// annotation was removed by someone who may patch Jobs), no apply starts; the condition and an
// event say a new plan must be made.
func TestAnApprovedApplyWithoutItsPlansDigestDoesNotStart(t *testing.T) {
	for _, tc := range []struct {
		rule string
		lose func(h *harness, plan batchv1.Job)
	}{
		{"a deleted plan Job leaves no digest", func(h *harness, plan batchv1.Job) {
			if err := h.c.Delete(h.ctx, &plan, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
				t.Fatal(err)
			}
		}},
		{"a removed digest annotation leaves no digest", func(h *harness, plan batchv1.Job) {
			patch := client.MergeFrom(plan.DeepCopy())
			delete(plan.Annotations, jobs.AnnotationImageDigest)
			if err := h.c.Patch(h.ctx, &plan, patch); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			h := newHarness(t, jobs.KindCluster)
			obj := h.provisioned(func(c *infrav1.TerraformCluster) { c.Spec.ApplyPolicy = infrav1.ApplyPolicyManual })
			h.setVariables(obj, `{"region":"us"}`)
			h.settle(obj)
			h.tagDigest[image] = digestOld
			plan := h.runningJob(jobs.KindCluster, "web")
			h.finish(plan, jobs.OutcomeSucceeded, &jobs.RunnerResult{Plan: &jobs.RunnerPlan{Hash: planA}})
			h.settle(obj)
			if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(&plan), &plan); err != nil {
				t.Fatal(err)
			}
			if plan.Annotations[jobs.AnnotationImageDigest] != digestOld {
				t.Fatalf("the plan Job's digest = %q", plan.Annotations[jobs.AnnotationImageDigest])
			}
			tc.lose(h, plan)
			h.events()
			h.annotate(obj, jobs.AnnotationApprovePlan, planA)
			h.settle(obj)

			for _, j := range h.jobs(jobs.KindCluster, "web") {
				if jobs.OpOf(&j) == jobs.OpApply && !jobs.OutcomeOf(&j).Finished() {
					t.Fatalf("apply Job %s started with image %q", j.Name, sourceImage(j))
				}
			}
			h.get(obj)
			c := conditions.Get(obj.Status.Conditions, conditions.ApplyJobSucceeded)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != conditions.ReasonPlanDigestUnknown || !strings.Contains(c.Message, "new plan") {
				t.Fatalf("ApplyJobSucceeded = %+v, want False/%s", c, conditions.ReasonPlanDigestUnknown)
			}
			if ev := h.events(); countPrefix(ev, "Warning PlanDigestUnknown") != 1 {
				t.Errorf("events = %v", ev)
			}
		})
	}
}

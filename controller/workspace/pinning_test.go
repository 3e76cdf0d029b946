package workspace_test

import (
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
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

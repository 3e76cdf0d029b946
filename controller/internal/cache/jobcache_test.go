package cache_test

import (
	"reflect"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/captf/captf/controller/decide"
	"github.com/captf/captf/controller/internal/cache"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/jobstest"
)

// fullJob is a Job as the API server holds it: a pod template, managed fields, the counts and
// the conditions the Job controller sets besides the finish.
func fullJob(b jobstest.Builder, annotations map[string]string) batchv1.Job {
	b.Kind, b.Name, b.Namespace = jobs.KindCluster, "web", "team"
	b.Annotations = annotations
	j := b.Job()
	j.UID = "job-uid"
	j.ResourceVersion = "42"
	j.OwnerReferences = []metav1.OwnerReference{{APIVersion: "infrastructure.cluster.x-k8s.io/v1alpha1", Kind: "TerraformCluster", Name: "web", UID: "owner", Controller: ptr.To(true)}}
	j.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate}}
	j.Spec.Template.Spec.Containers = []corev1.Container{{Name: "source", Image: "ghcr.io/captf/m:v1", Args: []string{"run", "--op=" + string(b.Op)}}}
	j.Spec.ActiveDeadlineSeconds = ptr.To[int64](3600)
	j.Status.Succeeded, j.Status.Failed, j.Status.Ready = 1, 2, ptr.To[int32](0)
	j.Status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{}
	if len(j.Status.Conditions) > 0 {
		// The Job controller sets these before the finish condition.
		j.Status.Conditions = append([]batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Message: "target"},
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionFalse},
		}, j.Status.Conditions...)
	}
	return j
}

func slim(t *testing.T, j batchv1.Job) batchv1.Job {
	t.Helper()
	out, err := cache.SlimJob(&j)
	if err != nil {
		t.Fatal(err)
	}
	return *out.(*batchv1.Job)
}

func TestSlimJobKeepsWhatTheRunModelReads(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	driftFound, err := jobs.EncodeSummary(jobs.Summary{Outcome: jobs.OutcomeSucceeded, Drift: &jobs.DriftSummary{Detected: true, Change: 1}})
	if err != nil {
		t.Fatal(err)
	}
	applied, err := jobs.EncodeSummary(jobs.Summary{Outcome: jobs.OutcomeSucceeded, Changes: &jobs.Changes{Add: 1}})
	if err != nil {
		t.Fatal(err)
	}
	at := func(minutes int) time.Time { return created.Add(time.Duration(minutes) * time.Minute) }
	retained := []batchv1.Job{
		fullJob(jobstest.Builder{Op: jobs.OpApply, Attempt: 1, Outcome: jobs.OutcomeFailed, Created: at(0)}, nil),
		fullJob(jobstest.Builder{Op: jobs.OpApply, Attempt: 2, Outcome: jobs.OutcomeDeadlineExceeded, Created: at(10)}, nil),
		fullJob(jobstest.Builder{Op: jobs.OpApply, Attempt: 3, Outcome: jobs.OutcomeSucceeded, Created: at(20)}, map[string]string{jobs.AnnotationResult: applied, jobs.AnnotationInputsHash: "h1:abc"}),
		fullJob(jobstest.Builder{Op: jobs.OpDrift, Attempt: 1, Outcome: jobs.OutcomeSucceeded, Created: at(30)}, map[string]string{jobs.AnnotationResult: driftFound}),
		fullJob(jobstest.Builder{Op: jobs.OpPlan, Attempt: 1, Outcome: jobs.OutcomeBlocked, Created: at(40)}, nil),
		fullJob(jobstest.Builder{Op: jobs.OpApply, Attempt: 4, Outcome: jobs.OutcomeInterrupted, Created: at(50)}, nil),
		fullJob(jobstest.Builder{Op: jobs.OpApply, Attempt: 5, Outcome: jobs.OutcomeRunning, Created: at(60)}, map[string]string{jobs.AnnotationApprovedPlan: "p3:abc"}),
	}
	slimmed := make([]batchv1.Job, len(retained))
	for i := range retained {
		slimmed[i] = slim(t, retained[i])
	}
	for i := range retained {
		full, s := &retained[i], &slimmed[i]
		for _, rule := range []struct {
			name      string
			full, got any
		}{
			{"OutcomeOf", jobs.OutcomeOf(full), jobs.OutcomeOf(s)},
			{"OpOf", jobs.OpOf(full), jobs.OpOf(s)},
			{"AttemptOf", jobs.AttemptOf(full), jobs.AttemptOf(s)},
			{"FinishedAt", fmtTime(jobs.FinishedAt(full)), fmtTime(jobs.FinishedAt(s))},
			{"StartedAt", fmtTime(jobs.StartedAt(full)), fmtTime(jobs.StartedAt(s))},
			{"RetryNumber", jobs.RetryNumber(full, retained), jobs.RetryNumber(s, slimmed)},
			{"IsRunOf", jobs.IsRunOf(full, "owner"), jobs.IsRunOf(s, "owner")},
		} {
			if !reflect.DeepEqual(rule.full, rule.got) {
				t.Errorf("%s of %s: %v on the slim Job, %v on the full one", rule.name, full.Name, rule.got, rule.full)
			}
		}
	}
	limits := jobs.Limits{}
	now := at(90)
	for _, rule := range []struct {
		name      string
		full, got any
	}{
		{"NextAttempt", jobs.NextAttempt(retained, jobs.OpApply), jobs.NextAttempt(slimmed, jobs.OpApply)},
		{"FailureStreak", names(jobs.FailureStreak(retained, jobs.OpApply)), names(jobs.FailureStreak(slimmed, jobs.OpApply))},
		{"ActiveJob", jobs.ActiveJob(retained).Name, jobs.ActiveJob(slimmed).Name},
		{"Backoff", fmtBackoff(jobs.Backoff(retained, jobs.OpApply, limits, now)), fmtBackoff(jobs.Backoff(slimmed, jobs.OpApply, limits, now))},
		{"Prune", jobs.Prune(retained, limits), jobs.Prune(slimmed, limits)},
		{"RemediationFailures", jobs.RemediationFailures(retained, at(30)), jobs.RemediationFailures(slimmed, at(30))},
		{"DriftFound", decide.DriftFound(retained), decide.DriftFound(slimmed)},
	} {
		if !reflect.DeepEqual(rule.full, rule.got) {
			t.Errorf("%s: %v on the slim Jobs, %v on the full ones", rule.name, rule.got, rule.full)
		}
	}
	if !decide.DriftFound(slimmed) {
		t.Error("the drift check's result was dropped: drift found reads false")
	}
}

func TestSlimJobDropsWhatIsNeverRead(t *testing.T) {
	applied, err := jobs.EncodeSummary(jobs.Summary{Outcome: jobs.OutcomeSucceeded})
	if err != nil {
		t.Fatal(err)
	}
	full := fullJob(jobstest.Builder{Op: jobs.OpApply, Attempt: 1, Outcome: jobs.OutcomeSucceeded, Created: time.Now()}, map[string]string{jobs.AnnotationResult: applied})
	s := slim(t, full)
	for _, rule := range []struct {
		name    string
		dropped bool
	}{
		{"the pod template and the rest of the spec", reflect.DeepEqual(s.Spec, batchv1.JobSpec{})},
		{"managed fields", s.ManagedFields == nil},
		{"the pod counts", s.Status.Succeeded == 0 && s.Status.Failed == 0 && s.Status.Ready == nil && s.Status.UncountedTerminatedPods == nil},
		{"conditions other than the finish", len(s.Status.Conditions) == 1 && s.Status.Conditions[0].Type == batchv1.JobComplete},
		{"the result of a Job other than a drift check", s.Annotations[jobs.AnnotationResult] == "" && s.Annotations[jobs.AnnotationBookkept] == "true"},
	} {
		if !rule.dropped {
			t.Errorf("%s kept: %+v", rule.name, s)
		}
	}
	if full.Annotations[jobs.AnnotationResult] == "" {
		t.Error("SlimJob changed the Job it was given")
	}
	if again := slim(t, s); !reflect.DeepEqual(again, s) {
		t.Errorf("slimming a slim Job changed it:\n%+v\n%+v", again, s)
	}
	if out, err := cache.SlimJob("not a Job"); err != nil || out != "not a Job" {
		t.Errorf("SlimJob of another type = %v, %v; want it as given", out, err)
	}
}

func TestTheJobCacheGivesBackWhatSlimJobKeeps(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	driftFound, err := jobs.EncodeSummary(jobs.Summary{Outcome: jobs.OutcomeSucceeded, Drift: &jobs.DriftSummary{Detected: true}})
	if err != nil {
		t.Fatal(err)
	}
	for _, full := range []batchv1.Job{
		fullJob(jobstest.Builder{Op: jobs.OpApply, Attempt: 1, Outcome: jobs.OutcomeRunning, Created: created}, nil),
		fullJob(jobstest.Builder{Op: jobs.OpApply, Attempt: 2, Outcome: jobs.OutcomeSucceeded, Created: created}, map[string]string{jobs.AnnotationInputsHash: "h1:abc"}),
		fullJob(jobstest.Builder{Op: jobs.OpApply, Attempt: 3, Outcome: jobs.OutcomeDeadlineExceeded, Created: created}, nil),
		fullJob(jobstest.Builder{Op: jobs.OpDrift, Attempt: 1, Outcome: jobs.OutcomeSucceeded, Created: created}, map[string]string{jobs.AnnotationResult: driftFound}),
	} {
		want := slim(t, full)
		want.TypeMeta = metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"}
		cached := cache.CachedJobOf(&full)
		got := cached.Job()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the cache gives back\n%+v\nSlimJob keeps\n%+v", full.Name, got, want)
		}
		// What a reader gets is its own: changing it leaves the cache as it was.
		got.Labels[jobs.LabelOp] = "changed"
		if again := cached.Job(); !reflect.DeepEqual(again, want) {
			t.Errorf("%s: a change to a Job read from the cache reached the cache", full.Name)
		}
		cp := cached.DeepCopyObject().(*cache.CachedJob)
		if !reflect.DeepEqual(cp.Job(), want) {
			t.Errorf("%s: the deep copy differs", full.Name)
		}
	}
}

func names(list []*batchv1.Job) []string {
	var out []string
	for _, j := range list {
		out = append(out, j.Name)
	}
	return out
}

func fmtTime(t time.Time, ok bool) string {
	if !ok {
		return "none"
	}
	return t.UTC().Format(time.RFC3339)
}

func fmtBackoff(w jobs.BackoffWindow, ok bool) string {
	if !ok {
		return "none"
	}
	return w.RetryAfter.UTC().Format(time.RFC3339) + " after " + w.Delay.String()
}

package registry

import (
	"maps"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/utils/ptr"

	"github.com/captf/captf/apis/runs"
	"github.com/captf/captf/jobs"
)

func TestRunOf(t *testing.T) {
	ns, owner := "team-a", "web"
	longName := strings.Repeat("x", 70)
	failedAt := t0.Add(-time.Minute)
	tests := []struct {
		name     string
		job      *batchv1.Job
		retained []*batchv1.Job
		limits   jobs.Limits
		check    func(t *testing.T, r *runs.Run)
	}{
		{
			name: "the run's metadata is the Job's, without its annotations",
			job:  newJob(ns, owner, jobs.OpApply, 1),
			check: func(t *testing.T, r *runs.Run) {
				if r.Namespace != ns || !strings.HasPrefix(r.Name, "captf-c-web-apply-a1-") || r.UID == "" || r.ResourceVersion == "" {
					t.Errorf("metadata = %+v", r.ObjectMeta)
				}
				if r.Labels[jobs.LabelOp] != "apply" || r.Annotations != nil {
					t.Errorf("labels = %v, annotations = %v", r.Labels, r.Annotations)
				}
				if len(r.OwnerReferences) != 1 || r.OwnerReferences[0].Name != owner {
					t.Errorf("owner references = %v", r.OwnerReferences)
				}
			},
		},
		{
			name: "a Job that has not started is Pending without duration",
			job:  newJob(ns, owner, jobs.OpApply, 1),
			check: func(t *testing.T, r *runs.Run) {
				want := runs.RunSpec{Target: runs.Target{APIVersion: jobs.TargetAPIVersion, Kind: "TerraformCluster", Name: owner}, Operation: "apply", Attempt: 1, InputsHash: inputsHash}
				if !equality.Semantic.DeepEqual(r.Spec, want) {
					t.Errorf("spec: %s", diff.Diff(want, r.Spec))
				}
				if r.Status.Phase != runs.RunPhasePending || r.Status.Duration != nil || r.Status.RetryNumber != 1 || r.Status.Retention != runs.RetentionRunning {
					t.Errorf("status = %+v", r.Status)
				}
			},
		},
		{
			name: "a running Job's duration runs to the time of reading",
			job:  newJob(ns, owner, jobs.OpRefresh, 2, started(t0.Add(-90*time.Second))),
			check: func(t *testing.T, r *runs.Run) {
				if r.Status.Phase != runs.RunPhaseRunning || r.Status.Duration == nil || r.Status.Duration.Duration != 90*time.Second {
					t.Errorf("phase %s, duration %v", r.Status.Phase, r.Status.Duration)
				}
			},
		},
		{
			name: "a succeeded Job shows its change counts and completion time",
			job:  newJob(ns, owner, jobs.OpApply, 1, succeeded(t0.Add(-time.Minute)), withResult(jobs.Summary{Outcome: jobs.OutcomeSucceeded, Changes: &jobs.Changes{Add: 2, Change: 1, Destroy: 3, Import: 1}})),
			check: func(t *testing.T, r *runs.Run) {
				if want := (runs.Changes{Add: 2, Change: 1, Destroy: 3, Import: 1}); r.Status.Changes == nil || *r.Status.Changes != want {
					t.Errorf("changes = %+v", r.Status.Changes)
				}
				if r.Status.CompletionTime == nil || !r.Status.CompletionTime.Time.Equal(t0.Add(-time.Minute)) || r.Status.Duration.Duration != time.Minute {
					t.Errorf("completion %v, duration %v", r.Status.CompletionTime, r.Status.Duration)
				}
				if r.Status.Retention != runs.RetentionNewestSuccess || r.Status.CountsTowardBackoff || r.Status.Backoff != nil {
					t.Errorf("status = %+v", r.Status)
				}
			},
		},
		{
			name:     "the newest counted failure carries the backoff window of the streak",
			job:      newJob(ns, owner, jobs.OpApply, 3, failed(failedAt), withResult(jobs.Summary{Outcome: jobs.OutcomeFailed, Error: &jobs.ErrorSummary{Kind: jobs.ErrorKindStep, Step: "apply", Summary: "boom"}})),
			retained: []*batchv1.Job{newJob(ns, owner, jobs.OpApply, 1, succeeded(t0.Add(-50*time.Minute))), newJob(ns, owner, jobs.OpApply, 2, failed(t0.Add(-20*time.Minute)))},
			check: func(t *testing.T, r *runs.Run) {
				want := &runs.Backoff{Failures: 2, Delay: metav1.Duration{Duration: 2 * time.Minute}, RetryAfter: metav1.NewTime(failedAt.Add(2 * time.Minute)), Active: true}
				if !equality.Semantic.DeepEqual(r.Status.Backoff, want) {
					t.Errorf("backoff: %s", diff.Diff(want, r.Status.Backoff))
				}
				if r.Status.RetryNumber != 2 || !r.Status.CountsTowardBackoff || r.Status.Retention != runs.RetentionUnresolvedFailure {
					t.Errorf("retry %d, counts %v, retention %s", r.Status.RetryNumber, r.Status.CountsTowardBackoff, r.Status.Retention)
				}
				if want := (runs.RunError{Kind: "step", Step: "apply", Summary: "boom"}); r.Status.Error == nil || *r.Status.Error != want {
					t.Errorf("error = %+v", r.Status.Error)
				}
			},
		},
		{
			name:     "an older failure has no backoff window",
			job:      newJob(ns, owner, jobs.OpApply, 2, failed(t0.Add(-20*time.Minute))),
			retained: []*batchv1.Job{newJob(ns, owner, jobs.OpApply, 3, failed(failedAt))},
			check: func(t *testing.T, r *runs.Run) {
				if r.Status.Backoff != nil || r.Status.RetryNumber != 1 || r.Status.Retention != runs.RetentionWithinLimit {
					t.Errorf("status = %+v", r.Status)
				}
			},
		},
		{
			name:     "failures reaching the failed limit wait the cap; an expired window is inactive",
			job:      newJob(ns, owner, jobs.OpDrift, 2, deadline(t0.Add(-11*time.Minute))),
			retained: []*batchv1.Job{newJob(ns, owner, jobs.OpDrift, 1, failed(t0.Add(-30*time.Minute)))},
			limits:   jobs.Limits{FailedJobsHistoryLimit: ptr.To[int32](2)},
			check: func(t *testing.T, r *runs.Run) {
				b := r.Status.Backoff
				if r.Status.Phase != runs.RunPhaseDeadlineExceeded || b == nil || b.Failures != 2 || b.Delay.Duration != jobs.BackoffCap || b.Active {
					t.Errorf("phase %s, backoff %+v", r.Status.Phase, b)
				}
			},
		},
		{
			name:     "a run beyond the failed limit is marked for pruning",
			job:      newJob(ns, owner, jobs.OpApply, 1, failed(t0.Add(-40*time.Minute))),
			retained: []*batchv1.Job{newJob(ns, owner, jobs.OpApply, 2, failed(failedAt))},
			limits:   jobs.Limits{FailedJobsHistoryLimit: ptr.To[int32](1)},
			check: func(t *testing.T, r *runs.Run) {
				if r.Status.Retention != runs.RetentionBeyondLimit {
					t.Errorf("retention = %s", r.Status.Retention)
				}
			},
		},
		{
			name: "an interrupted run does not count toward backoff",
			job:  newJob(ns, owner, jobs.OpApply, 1, failed(failedAt), annotated(jobs.AnnotationInterrupted, "true")),
			check: func(t *testing.T, r *runs.Run) {
				if r.Status.Phase != runs.RunPhaseInterrupted || r.Status.CountsTowardBackoff || r.Status.Backoff != nil {
					t.Errorf("status = %+v", r.Status)
				}
			},
		},
		{
			name: "a drift check shows what it found; a remediation apply is marked",
			job: newJob(ns, owner, jobs.OpDrift, 1, succeeded(failedAt), annotated(jobs.AnnotationDriftRemediation, "true"),
				withResult(jobs.Summary{Drift: &jobs.DriftSummary{Detected: true, Change: 1, Resources: []jobs.ResourceChange{{Address: "a.b", Actions: []string{"update"}}}}})),
			check: func(t *testing.T, r *runs.Run) {
				want := &runs.Drift{Detected: true, Change: 1, Resources: []runs.ResourceChange{{Address: "a.b", Actions: []string{"update"}}}}
				if !equality.Semantic.DeepEqual(r.Status.Drift, want) || !r.Spec.DriftRemediation {
					t.Errorf("drift: %s; remediation %v", diff.Diff(want, r.Status.Drift), r.Spec.DriftRemediation)
				}
			},
		},
		{
			name: "an unreadable result is flagged and shows nothing",
			job:  newJob(ns, owner, jobs.OpApply, 1, failed(failedAt), annotated(jobs.AnnotationResult, "not json")),
			check: func(t *testing.T, r *runs.Run) {
				if !r.Status.ResultUnreadable || r.Status.Error != nil {
					t.Errorf("status = %+v", r.Status)
				}
			},
		},
		{
			name: "the target of a long name comes from the owner reference, not the hashed label",
			job:  newJob(ns, longName, jobs.OpPlan, 1),
			check: func(t *testing.T, r *runs.Run) {
				if r.Spec.Target.Name != longName || r.Labels[jobs.LabelOwnerName] == longName {
					t.Errorf("target %q, label %q", r.Spec.Target.Name, r.Labels[jobs.LabelOwnerName])
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			retained := []batchv1.Job{*tt.job}
			for _, j := range tt.retained {
				retained = append(retained, *j)
			}
			tt.check(t, RunOf(tt.job, retained, tt.limits, t0))
		})
	}
}

func TestPlanOf(t *testing.T) {
	ns, owner := "team-a", "web"
	planAt := t0.Add(-10 * time.Minute)
	planJob := func(opts ...jobOpt) *batchv1.Job {
		return newJob(ns, owner, jobs.OpPlan, 1, append([]jobOpt{succeeded(planAt), withResult(jobs.Summary{Plan: &jobs.PlanSummary{
			Hash: planHash, Add: 1, Destroy: 1, Destructive: true,
			Resources: []jobs.ResourceChange{{Address: "terraform_data.a", Actions: []string{"delete", "create"}}},
		}})}, opts...)...)
	}
	current := func(job *batchv1.Job) *jobs.CurrentPlan {
		return &jobs.CurrentPlan{InputsHash: inputsHash, PlanHash: planHash, Job: job.Name}
	}
	approvedAt := t0.Add(-time.Minute).Format(time.RFC3339)
	tests := []struct {
		name     string
		job      *batchv1.Job
		retained []*batchv1.Job
		owner    func(job *batchv1.Job) jobs.PlanOwner
		wantOK   bool
		check    func(t *testing.T, p *runs.Plan)
	}{
		{
			name:   "an apply that did not stop for approval carries no plan",
			job:    newJob(ns, owner, jobs.OpApply, 1, succeeded(planAt)),
			wantOK: false,
		},
		{
			name:   "the current plan awaits approval and shows its content",
			job:    planJob(),
			owner:  func(j *batchv1.Job) jobs.PlanOwner { return jobs.PlanOwner{Plan: current(j)} },
			wantOK: true,
			check: func(t *testing.T, p *runs.Plan) {
				want := runs.PlanStatus{
					Phase: runs.PlanPhaseAwaitingApproval, PlanHash: planHash, ApprovalHash: planHash, Add: 1, Destroy: 1, Destructive: true,
					Resources: []runs.ResourceChange{{Address: "terraform_data.a", Actions: []string{"delete", "create"}}},
				}
				if !equality.Semantic.DeepEqual(p.Status, want) {
					t.Errorf("status: %s", diff.Diff(want, p.Status))
				}
				if p.Spec.Source != runs.PlanSourcePlan || p.Spec.InputsHash != inputsHash || p.Spec.Target.Name != owner {
					t.Errorf("spec = %+v", p.Spec)
				}
			},
		},
		{
			name: "an approved plan names its approver",
			job:  planJob(),
			owner: func(j *batchv1.Job) jobs.PlanOwner {
				return PlanOwnerOf(map[string]string{jobs.AnnotationApprovePlan: planHash, jobs.AnnotationApprovedBy: "alice", jobs.AnnotationApprovedAt: approvedAt}, current(j))
			},
			wantOK: true,
			check: func(t *testing.T, p *runs.Plan) {
				if p.Status.Phase != runs.PlanPhaseApproved || p.Status.ApprovedBy != "alice" || p.Status.ApprovedAt == nil || p.Status.ApprovedAt.Format(time.RFC3339) != approvedAt {
					t.Errorf("status = %+v", p.Status)
				}
			},
		},
		{
			name: "a plan that is not the object's current one is superseded",
			job:  planJob(),
			owner: func(*batchv1.Job) jobs.PlanOwner {
				return jobs.PlanOwner{Plan: &jobs.CurrentPlan{PlanHash: planHash2, Job: "other"}}
			},
			wantOK: true,
			check: func(t *testing.T, p *runs.Plan) {
				if p.Status.Phase != runs.PlanPhaseSuperseded {
					t.Errorf("phase = %s", p.Status.Phase)
				}
			},
		},
		{
			name:   "a running plan Job is planning",
			job:    newJob(ns, owner, jobs.OpPlan, 1, started(planAt)),
			wantOK: true,
			check: func(t *testing.T, p *runs.Plan) {
				if p.Status.Phase != runs.PlanPhasePlanning || p.Status.PlanHash != "" {
					t.Errorf("status = %+v", p.Status)
				}
			},
		},
		{
			name:   "a blocked apply is a destructive plan approved by its inputs hash",
			job:    newJob(ns, owner, jobs.OpApply, 1, failed(planAt), annotated(jobs.AnnotationDestructivePlanBlocked, "true")),
			wantOK: true,
			check: func(t *testing.T, p *runs.Plan) {
				if p.Spec.Source != runs.PlanSourceBlockedApply || p.Status.Phase != runs.PlanPhaseAwaitingApproval || p.Status.ApprovalHash != inputsHash || !p.Status.Destructive {
					t.Errorf("plan = %+v", p)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			retained := []batchv1.Job{*tt.job}
			for _, j := range tt.retained {
				retained = append(retained, *j)
			}
			var owner jobs.PlanOwner
			if tt.owner != nil {
				owner = tt.owner(tt.job)
			}
			p, ok := PlanOf(tt.job, retained, owner)
			if ok != tt.wantOK {
				t.Fatalf("PlanOf ok = %v, want %v", ok, tt.wantOK)
			}
			if ok {
				if p.Name != tt.job.Name || p.ResourceVersion != tt.job.ResourceVersion {
					t.Errorf("metadata = %+v", p.ObjectMeta)
				}
				tt.check(t, p)
			}
		})
	}
}

func TestRecordKeepsWhatTheRunModelReads(t *testing.T) {
	deleting := metav1.NewTime(t0.Add(time.Second + 250*time.Millisecond))
	tests := []struct {
		name string
		job  *batchv1.Job
	}{
		{"a pending Job", newJob("ns", "web", jobs.OpApply, 1)},
		{"a running Job", newJob("ns", "web", jobs.OpPlan, 2, started(t0))},
		{"a failed Job with its marks and result", newJob("ns", "web", jobs.OpApply, 3, failed(t0), annotated(jobs.AnnotationInterrupted, "true"),
			withResult(jobs.Summary{Error: &jobs.ErrorSummary{Kind: jobs.ErrorKindInterrupted}}))},
		{"a succeeded Job being deleted", newJob("ns", "web", jobs.OpDrift, 4, succeeded(t0), func(j *batchv1.Job) { j.DeletionTimestamp = &deleting })},
		{"a Job without owner reference or attempt label", newJob("ns", "web", jobs.OpApply, 5, func(j *batchv1.Job) {
			j.OwnerReferences = nil
			delete(j.Labels, jobs.LabelAttempt)
		})},
		{"a Job with an empty attempt label and no labels else", newJob("ns", "web", jobs.OpApply, 6, func(j *batchv1.Job) {
			j.Labels = map[string]string{jobs.LabelAttempt: ""}
		})},
		{"a Job with a UID as the API server makes them", newJob("ns", "web", jobs.OpApply, 8, func(j *batchv1.Job) { j.UID = "0f8e2a1c-3b4d-4e5f-8a9b-0c1d2e3f4a5b" })},
		{"a Job with a UUID in capitals, kept as text", newJob("ns", "web", jobs.OpApply, 9, func(j *batchv1.Job) { j.UID = "0F8E2A1C-3B4D-4E5F-8A9B-0C1D2E3F4A5B" })},
		{"a Job without labels or annotations", newJob("ns", "web", jobs.OpApply, 7, func(j *batchv1.Job) { j.Labels, j.Annotations = nil, nil })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			job := tt.job
			job.Annotations = mergeMaps(job.Annotations, map[string]string{"unrelated.example.com/x": "y"})
			job.Status.Conditions = append(job.Status.Conditions, batchv1.JobCondition{Type: batchv1.JobSuspended, Status: "True"})
			r := recordOfJob(job)
			rebuilt := r.job()

			want := objectMetaOf(job)
			if got := objectMetaOf(&rebuilt); !equality.Semantic.DeepEqual(got, want) {
				t.Errorf("the record gives other metadata than the Job:\n%s", diff.Diff(want, got))
			}
			if _, ok := rebuilt.Annotations["unrelated.example.com/x"]; ok {
				t.Errorf("kept an annotation the run model does not read: %v", rebuilt.Annotations)
			}
			for _, key := range jobAnnotations {
				if rebuilt.Annotations[key] != job.Annotations[key] {
					t.Errorf("annotation %s = %q, want %q", key, rebuilt.Annotations[key], job.Annotations[key])
				}
			}
			for key, value := range job.Labels {
				if got, ok := r.labelSet().Lookup(key); !ok || got != value {
					t.Errorf("label %s = %q, %v; want %q", key, got, ok, value)
				}
			}
			if r.labelSet().Has("absent.example.com/x") {
				t.Errorf("the record has a label the Job does not")
			}
			if n := len(rebuilt.Status.Conditions); n > 1 || (n == 1 && rebuilt.Status.Conditions[0].Message != "") {
				t.Errorf("conditions = %+v, want only the finish condition without message", rebuilt.Status.Conditions)
			}
			if got, want := RunOf(&rebuilt, []batchv1.Job{rebuilt}, jobs.Limits{}, t0), RunOf(job, []batchv1.Job{*job}, jobs.Limits{}, t0); !equality.Semantic.DeepEqual(got, want) {
				t.Errorf("the record gives another run than the Job:\n%s", diff.Diff(want, got))
			}
			target := jobs.TargetOf(job)
			if got, want := r.ownerKey(), ownerKeyOf(job.Namespace, jobs.Kind(target.Kind), target.Name); got != want {
				t.Errorf("owner key = %q, want %q", got, want)
			}
			again, err := transformJob(r)
			if err != nil || again != r {
				t.Errorf("transform is not idempotent: %v, %v", again, err)
			}
		})
	}
}

// mergeMaps returns a copy of a with the entries of b added.
func mergeMaps(a, b map[string]string) map[string]string {
	out := maps.Clone(a)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, b)
	return out
}

package registry

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/utils/ptr"

	"github.com/captf/captf/jobs"
)

// unreadJobAnnotations are annotations a Job may carry that no view reads: the controller's
// own, an object's approvals copied by hand, and someone else's.
var unreadJobAnnotations = map[string]string{
	jobs.AnnotationRestoreSerial:          "3",
	jobs.AnnotationAfterFailedApply:       "true",
	jobs.AnnotationAfterInterruptedApply:  "captf-tc-web-apply-a1-000000",
	jobs.AnnotationImageDigest:            "sha256:" + inputsHash[3:],
	jobs.AnnotationApprovePlan:            planHash,
	jobs.AnnotationApproveDestructivePlan: inputsHash,
	"unrelated.example.com/x":             "y",
}

// TestRecord_KeepsTheAnnotationsTheViewsReadAndTheSignatureCovers: a record keeps the
// annotations of jobs.ViewAnnotations and every other captf.io/ one, which the controller's
// signature covers, and no other.
func TestRecord_KeepsTheAnnotationsTheViewsReadAndTheSignatureCovers(t *testing.T) {
	job := newJob("ns", "web", jobs.OpApply, 1, succeeded(t0))
	want := maps.Clone(job.Annotations) // the inputs hash and the signature
	for i, key := range jobs.ViewAnnotations() {
		want[key] = "value-" + strconv.Itoa(i)
	}
	for k, v := range unreadJobAnnotations {
		if strings.HasPrefix(k, "captf.io/") {
			want[k] = v
		}
	}
	maps.Copy(job.Annotations, want)
	maps.Copy(job.Annotations, unreadJobAnnotations)
	if got := recordOfJob(job).job().Annotations; !maps.Equal(got, want) {
		t.Errorf("the record keeps other annotations than the views' and the signed ones:\n%s", diff.Diff(want, got))
	}
}

func TestOwnerRecord_KeepsExactlyTheApprovalAnnotations(t *testing.T) {
	approvals := map[string]string{
		jobs.AnnotationApprovePlan:            planHash,
		jobs.AnnotationApproveDestructivePlan: inputsHash,
		jobs.AnnotationApprovedBy:             "alice",
		jobs.AnnotationApprovedAt:             t0.Format(time.RFC3339),
	}
	if got := slices.Sorted(maps.Keys(approvals)); !slices.Equal(got, slices.Sorted(slices.Values(jobs.ApprovalAnnotations()))) {
		t.Fatalf("the test's approvals %v are not jobs.ApprovalAnnotations", got)
	}
	all := maps.Clone(approvals)
	all[jobs.AnnotationRestoreState] = "4"
	all["unrelated.example.com/x"] = "y"
	r, _ := recordOfOwner(cluster("ns", "web", nil, nil, all))
	if !maps.Equal(r.Annotations, approvals) {
		t.Errorf("the record keeps other annotations than jobs.ApprovalAnnotations:\n%s", diff.Diff(approvals, r.Annotations))
	}
	if got, want := PlanOwnerOf(r.Annotations, nil), PlanOwnerOf(all, nil); !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("the record gives other approvals than the object:\n%s", diff.Diff(want, got))
	}
}

// TestRecord_GivesEveryViewOfTheJob rebuilds an object's Jobs, which between them carry every
// annotation of jobs.ViewAnnotations and others besides, from their records, and checks that
// every view the server serves (runs, plans, approval decisions) is the view of the Jobs
// themselves, for owners with and without approvals.
func TestRecord_GivesEveryViewOfTheJob(t *testing.T) {
	approvedAt := t0.Add(-50 * time.Minute).Format(time.RFC3339)
	approver := func(by string) jobOpt {
		return func(j *batchv1.Job) {
			j.Annotations[jobs.AnnotationApprovedBy], j.Annotations[jobs.AnnotationApprovedAt] = by, approvedAt
		}
	}
	planResult := func(hash string, destroy int) jobOpt {
		return withResult(jobs.Summary{Outcome: jobs.OutcomeSucceeded, Plan: &jobs.PlanSummary{Hash: hash, Add: 1, Destroy: destroy, Destructive: destroy > 0}})
	}
	at := func(minutes int) time.Time { return t0.Add(time.Duration(minutes-60) * time.Minute) }
	history := []*batchv1.Job{
		newJob("ns", "web", jobs.OpPlan, 1, succeeded(at(2)), planResult(planHash, 0)),
		newJob("ns", "web", jobs.OpApply, 2, succeeded(at(3)), annotated(jobs.AnnotationApprovedPlan, planHash), approver("alice"),
			withResult(jobs.Summary{Outcome: jobs.OutcomeSucceeded, Changes: &jobs.Changes{Add: 1}})),
		newJob("ns", "web", jobs.OpApply, 3, failed(at(4)), annotated(jobs.AnnotationInterrupted, "true"), annotated(jobs.AnnotationDriftRemediation, "true")),
		newJob("ns", "web", jobs.OpApply, 4, failed(at(5)), annotated(jobs.AnnotationDestructivePlanBlocked, "true"),
			withResult(jobs.Summary{Outcome: jobs.OutcomeBlocked, Plan: &jobs.PlanSummary{Destroy: 1, Destructive: true}})),
		newJob("ns", "web", jobs.OpApply, 5, failed(at(6)), annotated(jobs.AnnotationPlanChanged, "true"), annotated(jobs.AnnotationApprovedPlan, planHash),
			approver("bob"), withResult(jobs.Summary{Outcome: jobs.OutcomePlanChanged, Plan: &jobs.PlanSummary{Hash: planHash2, Change: 1}})),
		newJob("ns", "web", jobs.OpPlan, 6, succeeded(at(7)), annotated(jobs.AnnotationPlanUnreadable, "true"), annotated(jobs.AnnotationBookkept, "true")),
		newJob("ns", "web", jobs.OpPlan, 7, succeeded(at(8)), annotated(jobs.AnnotationBookkept, "true")),
		newJob("ns", "web", jobs.OpDrift, 8, deadline(at(9)), withResult(jobs.Summary{Outcome: jobs.OutcomeDeadlineExceeded,
			Error: &jobs.ErrorSummary{Kind: jobs.ErrorKindStep, Step: "plan", Summary: "Error: é"}})),
		newJob("ns", "web", jobs.OpDrift, 9, succeeded(at(10)), withResult(jobs.Summary{Outcome: jobs.OutcomeSucceeded, Drift: &jobs.DriftSummary{Detected: true, Change: 1}})),
		newJob("ns", "web", jobs.OpApply, 10, started(at(11)), annotated(jobs.AnnotationDriftRemediation, "true")),
		newJob("ns", "web", jobs.OpRefresh, 11, annotated(jobs.AnnotationResult, "{not json")),
	}
	var original, rebuilt []batchv1.Job
	carried := map[string]bool{}
	for _, j := range history {
		for key := range j.Annotations {
			carried[key] = true
		}
		maps.Copy(j.Annotations, unreadJobAnnotations)
		original = append(original, *j)
		rebuilt = append(rebuilt, recordOfJob(j).job())
	}
	for _, key := range jobs.ViewAnnotations() {
		if !carried[key] {
			t.Fatalf("no Job of the test carries %s: add one whose views depend on it", key)
		}
	}

	approvals := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	owners := []struct {
		name        string
		annotations map[string]string
		plan        *jobs.CurrentPlan
	}{
		{"an owner without approvals or plan", nil, nil},
		{"an owner whose plan is the first plan's, approved", approvals(jobs.AnnotationApprovePlan, planHash, jobs.AnnotationApprovedBy, "carol", jobs.AnnotationApprovedAt, approvedAt),
			&jobs.CurrentPlan{InputsHash: inputsHash, PlanHash: planHash, Job: history[0].Name}},
		{"an owner whose plan is the changed apply's, not approved", nil,
			&jobs.CurrentPlan{InputsHash: inputsHash, PlanHash: planHash2, Job: history[4].Name}},
		{"an owner that approved the destructive plan", approvals(jobs.AnnotationApproveDestructivePlan, inputsHash, jobs.AnnotationApprovedBy, "dave"), nil},
	}
	limits := jobs.Limits{FailedJobsHistoryLimit: ptr.To[int32](1)}
	for _, o := range owners {
		t.Run(o.name, func(t *testing.T) {
			owner := PlanOwnerOf(o.annotations, o.plan)
			owner.UID = history[0].OwnerReferences[0].UID
			check := func(what string, want, got any) {
				t.Helper()
				if !equality.Semantic.DeepEqual(want, got) {
					t.Errorf("%s of the rebuilt Job differs from the Job's:\n%s", what, diff.Diff(want, got))
				}
			}
			check("the runs", RunsOf(jobs.NewHistory(original, limits), t0), RunsOf(jobs.NewHistory(rebuilt, limits), t0))
			for i := range original {
				name := original[i].Name
				check("the run of "+name, RunOf(&original[i], original, limits, t0), RunOf(&rebuilt[i], rebuilt, limits, t0))
				want, wantOK := PlanOf(&original[i], original, owner)
				got, gotOK := PlanOf(&rebuilt[i], rebuilt, owner)
				check("the plan of "+name, want, got)
				if wantOK != gotOK {
					t.Errorf("the rebuilt %s carries a plan: %v, want %v", name, gotOK, wantOK)
				}
				for _, hash := range []string{planHash, planHash2, inputsHash} {
					check("the approval of "+name+" for "+hash,
						jobs.PlanApprovalCheck(&original[i], original, owner, hash, "erin", t0),
						jobs.PlanApprovalCheck(&rebuilt[i], rebuilt, owner, hash, "erin", t0))
				}
			}
		})
	}
}

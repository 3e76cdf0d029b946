package registry

import (
	"strconv"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/diff"

	"github.com/captf/captf/apis/runs"
	"github.com/captf/captf/jobs"
)

// maxRecordText bounds the text one record keeps, whatever its Job carries: the result, the
// other kept annotations, maxLabels labels, the controller reference and the finish reason, each
// at its bound, come to just under 32 KiB.
const maxRecordText = 32 << 10

// TestRecordBoundsWhatOthersWrite: whoever may write Jobs writes their labels, annotations,
// owner references and conditions. A record keeps each within its bound, so that no Job costs
// the server more than maxRecordText; what is past a bound reads as unknown (no value, an
// unreadable result, a target from the labels) and never as an error.
func TestRecordBoundsWhatOthersWrite(t *testing.T) {
	big := func(n int) string { return strings.Repeat("x", n) }
	tests := []struct {
		name string
		job  *batchv1.Job
		// sameRun is set when the record must give the run the Job gives.
		sameRun bool
		check   func(t *testing.T, job, rebuilt *batchv1.Job, run *runs.Run)
	}{
		{
			name: "a 200 KiB result reads as unreadable, as the Job's does",
			job: newJob("ns", "web", jobs.OpApply, 1, succeeded(t0), annotated(jobs.AnnotationBookkept, "true"),
				annotated(jobs.AnnotationResult, `{"outcome":"Succeeded","error":{"summary":"`+big(200<<10)+`"}}`)),
			sameRun: true,
			check: func(t *testing.T, _, rebuilt *batchv1.Job, run *runs.Run) {
				if v, ok := rebuilt.Annotations[jobs.AnnotationResult]; !ok || v != "" {
					t.Errorf("result kept as %d bytes, present %v; want present and empty", len(v), ok)
				}
				if !run.Status.ResultUnreadable || run.Status.Error != nil {
					t.Errorf("run status %+v, want an unreadable result", run.Status)
				}
			},
		},
		{
			name: "a result of exactly the bound is kept as it is",
			job: newJob("ns", "web", jobs.OpApply, 2, succeeded(t0), annotated(jobs.AnnotationBookkept, "true"),
				annotated(jobs.AnnotationResult, padTo(`{"outcome":"Succeeded","changes":{"add":1,"change":0,"destroy":0}}`, jobs.MaxSummaryBytes))),
			sameRun: true,
			check: func(t *testing.T, job, rebuilt *batchv1.Job, run *runs.Run) {
				if rebuilt.Annotations[jobs.AnnotationResult] != job.Annotations[jobs.AnnotationResult] {
					t.Errorf("the result was not kept")
				}
				if run.Status.ResultUnreadable || run.Status.Changes == nil || run.Status.Changes.Add != 1 {
					t.Errorf("run status %+v, want the changes", run.Status)
				}
			},
		},
		{
			name: "a result that is not JSON reads as unreadable, as the Job's does",
			job: newJob("ns", "web", jobs.OpApply, 3, failed(t0), annotated(jobs.AnnotationBookkept, "true"),
				annotated(jobs.AnnotationResult, "\xff\x00not json")),
			sameRun: true,
			check: func(t *testing.T, _, _ *batchv1.Job, run *runs.Run) {
				if !run.Status.ResultUnreadable {
					t.Errorf("run status %+v, want an unreadable result", run.Status)
				}
			},
		},
		{
			name: "an oversized inputs hash and approved plan read as none",
			job: newJob("ns", "web", jobs.OpApply, 4, annotated(jobs.AnnotationInputsHash, big(maxAnnotationBytes+1)),
				annotated(jobs.AnnotationApprovedPlan, big(200<<10))),
			check: func(t *testing.T, _, rebuilt *batchv1.Job, run *runs.Run) {
				if run.Spec.InputsHash != "" || run.Spec.ApprovedPlan != "" {
					t.Errorf("run spec %.200v, want no inputs hash and no approved plan", run.Spec)
				}
				if _, ok := rebuilt.Annotations[jobs.AnnotationApprovedPlan]; !ok {
					t.Errorf("the approved plan annotation is gone, want it present and empty")
				}
			},
		},
		{
			name:    "an oversized mark still reads as set",
			job:     newJob("ns", "web", jobs.OpApply, 5, failed(t0), annotated(jobs.AnnotationInterrupted, big(100<<10))),
			sameRun: true,
			check: func(t *testing.T, _, _ *batchv1.Job, run *runs.Run) {
				if run.Status.Phase != runs.RunPhaseInterrupted {
					t.Errorf("phase %s, want %s", run.Status.Phase, runs.RunPhaseInterrupted)
				}
			},
		},
		{
			name: "thousands of labels keep the run model's first and at most maxLabels",
			job: newJob("ns", "web", jobs.OpPlan, 6, started(t0), func(j *batchv1.Job) {
				for i := range 5000 {
					j.Labels["a.example.com/l"+strconv.Itoa(i)] = big(63)
				}
			}),
			check: func(t *testing.T, job, rebuilt *batchv1.Job, run *runs.Run) {
				if len(rebuilt.Labels) != maxLabels {
					t.Errorf("%d labels kept, want %d", len(rebuilt.Labels), maxLabels)
				}
				for _, k := range modelLabels {
					if rebuilt.Labels[k] != job.Labels[k] {
						t.Errorf("label %s = %q, want %q", k, rebuilt.Labels[k], job.Labels[k])
					}
				}
				if run.Spec.Operation != string(jobs.OpPlan) || run.Spec.Attempt != 6 || run.Spec.Target.Name != "web" {
					t.Errorf("run spec %+v, want the plan of web, attempt 6", run.Spec)
				}
			},
		},
		{
			name: "labels past the API server's limits are left out, an op among them",
			job: newJob("ns", "web", jobs.OpApply, 7, func(j *batchv1.Job) {
				j.Labels["a.example.com/"+big(1000)] = "v"
				j.Labels["a.example.com/big"] = big(100 << 10)
				j.Labels[jobs.LabelOp] = big(10 << 10)
			}),
			check: func(t *testing.T, job, rebuilt *batchv1.Job, run *runs.Run) {
				if len(rebuilt.Labels) != len(job.Labels)-3 {
					t.Errorf("labels kept: %.300v, want all but the three oversized", rebuilt.Labels)
				}
				if _, ok := rebuilt.Labels[jobs.LabelOp]; ok || run.Spec.Operation != "" {
					t.Errorf("op label kept or read as %q", run.Spec.Operation)
				}
				if rebuilt.Labels[jobs.LabelOwnerName] != "web" {
					t.Errorf("owner name label = %q, want web", rebuilt.Labels[jobs.LabelOwnerName])
				}
			},
		},
		{
			name: "an oversized controller reference is left out; the target comes from the labels",
			job: newJob("ns", "web", jobs.OpApply, 8, func(j *batchv1.Job) {
				j.OwnerReferences[0].Name = big(100 << 10)
			}),
			check: func(t *testing.T, _, rebuilt *batchv1.Job, run *runs.Run) {
				if len(rebuilt.OwnerReferences) != 0 {
					t.Errorf("owner references kept: %.200v", rebuilt.OwnerReferences)
				}
				want := runs.Target{APIVersion: jobs.TargetAPIVersion, Kind: string(jobs.KindCluster), Name: "web"}
				if run.Spec.Target != want {
					t.Errorf("target %.200v, want %v", run.Spec.Target, want)
				}
			},
		},
		{
			name: "an oversized finish reason reads as none",
			job:  newJob("ns", "web", jobs.OpApply, 9, finished(batchv1.JobFailed, big(10<<10), t0)),
			check: func(t *testing.T, _, rebuilt *batchv1.Job, run *runs.Run) {
				if c := rebuilt.Status.Conditions; len(c) != 1 || c[0].Type != batchv1.JobFailed || c[0].Reason != "" {
					t.Errorf("conditions %.200v, want Failed without reason", c)
				}
				if run.Status.Phase != runs.RunPhaseFailed {
					t.Errorf("phase %s, want Failed", run.Status.Phase)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := recordOfJob(tt.job)
			if n := recordText(r); n > maxRecordText {
				t.Errorf("the record keeps %d bytes of text, more than %d", n, maxRecordText)
			}
			rebuilt := r.job()
			run := RunOf(&rebuilt, []batchv1.Job{rebuilt}, jobs.Limits{}, t0)
			if tt.sameRun {
				if want := RunOf(tt.job, []batchv1.Job{*tt.job}, jobs.Limits{}, t0); !equality.Semantic.DeepEqual(run, want) {
					t.Errorf("the record gives another run than the Job:\n%.2000s", diff.Diff(want, run))
				}
			}
			PlanOf(&rebuilt, []batchv1.Job{rebuilt}, jobs.PlanOwner{}) // must not panic either
			target := jobs.TargetOf(&rebuilt)
			if got, want := r.ownerKey(), ownerKeyOf(rebuilt.Namespace, jobs.Kind(target.Kind), target.Name); got != want {
				t.Errorf("owner key %.200q, want %.200q, the key of what the record keeps", got, want)
			}
			tt.check(t, tt.job, &rebuilt, run)
		})
	}
}

// TestOwnerRecordBoundsApprovalAnnotations: the approval annotations an owner record keeps are
// bounded like a Job's; an oversized one reads as no approval.
func TestOwnerRecordBoundsApprovalAnnotations(t *testing.T) {
	for _, tt := range []struct {
		name  string
		value string
		want  string
	}{
		{"an approval of a plan hash is kept", planHash, planHash},
		{"an approval of 200 KiB reads as none", strings.Repeat("p", 200<<10), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tc := cluster("ns", "web", nil, nil, map[string]string{
				jobs.AnnotationApprovePlan: tt.value,
				jobs.AnnotationApprovedBy:  strings.Repeat("u", 200<<10),
				"unrelated.example.com/x":  strings.Repeat("y", 200<<10),
			})
			r, ok := recordOfOwner(tc)
			if !ok {
				t.Fatal("no record of a TerraformCluster")
			}
			if got := r.Annotations[jobs.AnnotationApprovePlan]; got != tt.want {
				t.Errorf("approve-plan kept as %.80q (%d bytes), want %q", got, len(got), tt.want)
			}
			if got, ok := r.Annotations[jobs.AnnotationApprovedBy]; !ok || got != "" {
				t.Errorf("approved-by kept as %d bytes, present %v; want present and empty", len(got), ok)
			}
			if _, ok := r.Annotations["unrelated.example.com/x"]; ok {
				t.Errorf("kept an annotation the approval does not read")
			}
		})
	}
}

// recordText counts the bytes of text a record keeps of its Job.
func recordText(r *jobRecord) int {
	n := len(r.name) + len(r.resourceVersion) + len(r.finish.reason)
	for _, a := range r.annotations {
		n += len(a.key) + len(a.value)
	}
	for _, v := range r.own {
		n += len(v)
	}
	t := r.target.Value()
	n += len(t.namespace) + len(t.key) + len(t.labels)
	n += len(t.ref.apiVersion) + len(t.ref.kind) + len(t.ref.name) + len(t.ref.uid)
	return n
}

// padTo pads a JSON object with trailing spaces to n bytes.
func padTo(s string, n int) string { return s + strings.Repeat(" ", n-len(s)) }

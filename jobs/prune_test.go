package jobs

import (
	"slices"
	"sort"
	"testing"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/captf/captf/apis/runs"
)

// series returns attempts from..to of op, all in one state.
func series(op Op, from, to int32, st state) []batchv1.Job {
	var out []batchv1.Job
	for a := from; a <= to; a++ {
		out = append(out, mkJob(op, a, st))
	}
	return out
}

func concat(parts ...[]batchv1.Job) []batchv1.Job { return slices.Concat(parts...) }

func TestPrune(t *testing.T) {
	tests := []struct {
		name       string
		jobs       []batchv1.Job
		successful *int32
		failed     *int32
		want       []string
		// reasons of some retained Jobs
		reasons map[string]runs.Retention
	}{
		{
			name: "nothing beyond the default limits of 3 is pruned",
			jobs: concat(series(OpApply, 1, 3, succeeded), series(OpApply, 4, 6, failed)),
			want: []string{},
		},
		{
			name: "successes beyond the successful limit go, oldest first",
			jobs: series(OpApply, 1, 5, succeeded),
			want: []string{"apply-a1", "apply-a2"},
			reasons: map[string]runs.Retention{
				"apply-a5": runs.RetentionNewestSuccess, "apply-a4": runs.RetentionWithinLimit, "apply-a2": runs.RetentionBeyondLimit,
			},
		},
		{
			name: "failures beyond the failed limit go, oldest first",
			jobs: series(OpApply, 1, 5, failed),
			want: []string{"apply-a1", "apply-a2"},
			reasons: map[string]runs.Retention{
				"apply-a5": runs.RetentionUnresolvedFailure, "apply-a3": runs.RetentionWithinLimit, "apply-a1": runs.RetentionBeyondLimit,
			},
		},
		{
			name:   "limit 5 keeps five of each",
			jobs:   concat(series(OpApply, 1, 6, succeeded), series(OpApply, 7, 12, failed)),
			failed: limit(5), successful: limit(5),
			want: []string{"apply-a1", "apply-a7"},
		},
		{
			name:   "limit 1 keeps one of each",
			jobs:   concat(series(OpApply, 1, 2, failed), series(OpApply, 3, 4, succeeded), series(OpApply, 5, 6, failed)),
			failed: limit(1), successful: limit(1),
			want: []string{"apply-a1", "apply-a2", "apply-a3", "apply-a5"},
		},
		{
			name:   "limit 0 still keeps the newest success and the newest unresolved failure",
			jobs:   concat(series(OpApply, 1, 2, succeeded), series(OpApply, 3, 4, failed)),
			failed: limit(0), successful: limit(0),
			want: []string{"apply-a1", "apply-a3"},
			reasons: map[string]runs.Retention{
				"apply-a2": runs.RetentionNewestSuccess, "apply-a4": runs.RetentionUnresolvedFailure,
			},
		},
		{
			name:   "limit 0 prunes a failure that a newer success resolved",
			jobs:   concat(series(OpApply, 1, 1, failed), series(OpApply, 2, 2, succeeded)),
			failed: limit(0), successful: limit(0),
			want: []string{"apply-a1"},
		},
		{
			name:   "an old newest success is kept however many failures followed it",
			jobs:   concat(series(OpApply, 1, 1, succeeded), series(OpApply, 2, 9, failed)),
			failed: limit(3),
			want:   []string{"apply-a2", "apply-a3", "apply-a4", "apply-a5", "apply-a6"},
			reasons: map[string]runs.Retention{
				"apply-a1": runs.RetentionNewestSuccess, "apply-a9": runs.RetentionUnresolvedFailure,
			},
		},
		{
			name:   "running Jobs are never pruned and do not take a place in the limits",
			jobs:   concat(series(OpApply, 1, 2, succeeded), series(OpApply, 3, 3, running)),
			failed: limit(0), successful: limit(1),
			want: []string{"apply-a1"},
			reasons: map[string]runs.Retention{
				"apply-a3": runs.RetentionRunning, "apply-a2": runs.RetentionNewestSuccess,
			},
		},
		{
			name:   "a pending Job is never pruned",
			jobs:   concat(series(OpDestroy, 1, 1, failed), series(OpDestroy, 2, 2, pending)),
			failed: limit(0),
			want:   []string{},
		},
		{
			name:   "refresh and drift history never push out an apply's",
			jobs:   concat(series(OpApply, 1, 2, succeeded), series(OpRefresh, 1, 40, succeeded), series(OpDrift, 1, 40, failed)),
			failed: limit(3), successful: limit(3),
			want: slices.Concat(
				seriesNames(OpRefresh, 1, 37),
				seriesNames(OpDrift, 1, 37),
			),
		},
		{
			name: "every non-success outcome fills the failed limit: deadline, interrupted, blocked, plan-changed",
			jobs: jobs(
				mkJob(OpApply, 1, deadline), mkJob(OpApply, 2, interrupted), mkJob(OpApply, 3, blocked),
				mkJob(OpApply, 4, planChanged), mkJob(OpApply, 5, failed),
			),
			failed: limit(3),
			want:   []string{"apply-a1", "apply-a2"},
		},
		{
			name:   "an unreadable plan fills the failed limit, not the successful one",
			jobs:   concat(series(OpPlan, 1, 2, planUnreadable), series(OpPlan, 3, 3, succeeded)),
			failed: limit(0), successful: limit(0),
			want: []string{"plan-a1", "plan-a2"},
		},
		{
			name:   "a Job of an unknown op is left alone",
			jobs:   jobs(mkJob(OpApply, 1, failed, label(LabelOp, "import"))),
			failed: limit(0),
			want:   []string{},
			reasons: map[string]runs.Retention{
				"apply-a1": runs.RetentionUnknownOperation,
			},
		},
		{
			name:   "ops are reported in a fixed order, each oldest first",
			jobs:   concat(series(OpDrift, 1, 2, succeeded), series(OpApply, 1, 2, succeeded), series(OpPlan, 1, 2, succeeded)),
			failed: limit(0), successful: limit(0),
			want: []string{"apply-a1", "plan-a1", "drift-a1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			limits := Limits{SuccessfulJobsHistoryLimit: tt.successful, FailedJobsHistoryLimit: tt.failed}
			got := Prune(tt.jobs, limits)
			if got == nil {
				got = []string{}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Prune() = %v, want %v", got, tt.want)
			}
			reasons := Retentions(tt.jobs, limits)
			for name, want := range tt.reasons {
				if reasons[name] != want {
					t.Errorf("Retentions()[%s] = %s, want %s", name, reasons[name], want)
				}
			}
			// One rule, not two: BeyondLimit is exactly what Prune returns.
			var beyond []string
			for name, r := range reasons {
				if r == runs.RetentionBeyondLimit {
					beyond = append(beyond, name)
				}
			}
			sorted := slices.Clone(got)
			sort.Strings(sorted)
			sort.Strings(beyond)
			if beyond == nil {
				beyond = []string{}
			}
			if !slices.Equal(sorted, beyond) {
				t.Errorf("Retentions() BeyondLimit = %v, Prune() = %v", beyond, sorted)
			}
			if len(reasons) != len(tt.jobs) {
				t.Errorf("Retentions() has %d entries for %d Jobs", len(reasons), len(tt.jobs))
			}
		})
	}
}

func seriesNames(op Op, from, to int32) []string {
	var out []string
	for _, j := range series(op, from, to, succeeded) {
		out = append(out, j.Name)
	}
	return out
}

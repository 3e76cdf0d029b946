package workspace_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/captf/captf/jobs"
)

// TestStartedJobsAreCountedWithWhetherTheyRetry: every Job the controller creates is counted
// once in captf_jobs_started_total, and the Job after a failure of its op is marked as a retry;
// an interruption from outside is free, so the Job after it is not.
func TestStartedJobsAreCountedWithWhetherTheyRetry(t *testing.T) {
	for _, tc := range []struct {
		rule            string
		outcome         jobs.Outcome
		result          *jobs.RunnerResult
		firsts, retries float64
	}{
		{"the apply after a failed one is a retry", jobs.OutcomeFailed, nil, 1, 1},
		{"the apply after an interrupted one is not", jobs.OutcomeFailed, &jobs.RunnerResult{Error: &jobs.RunnerError{Kind: jobs.ErrorKindInterrupted}}, 2, 0},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			h := newHarness(t, jobs.KindCluster)
			obj := h.cluster("web")
			h.settle(obj)
			h.finish(h.runningJob(jobs.KindCluster, "web"), tc.outcome, tc.result)
			h.settle(obj)
			// Past the first backoff window, should there be one.
			h.clock.SetTime(h.clock.Now().Add(jobs.BackoffBase + time.Second))
			h.settle(obj)
			h.runningJob(jobs.KindCluster, "web")
			started := h.r.Metrics.JobsStarted
			firsts := testutil.ToFloat64(started.WithLabelValues("TerraformCluster", "apply", "false"))
			retries := testutil.ToFloat64(started.WithLabelValues("TerraformCluster", "apply", "true"))
			if firsts != tc.firsts || retries != tc.retries {
				t.Fatalf("started %v first tries and %v retries, want %v and %v", firsts, retries, tc.firsts, tc.retries)
			}
		})
	}
}

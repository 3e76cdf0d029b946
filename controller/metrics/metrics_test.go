package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/captf/captf/jobs"
)

func TestSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg, func() map[[2]string]int {
		return map[[2]string]int{{"TerraformCluster", "apply"}: 2}
	})
	if err != nil {
		t.Fatal(err)
	}
	m.Finished(jobs.KindCluster, jobs.OpApply, jobs.OutcomeSucceeded, 90*time.Second, 3)
	m.Finished(jobs.KindCluster, jobs.OpApply, jobs.OutcomeDeadlineExceeded, time.Hour, 1)
	m.Decided(jobs.KindMachine, "", "UpToDate")
	m.LeaseWaits.WithLabelValues("TerraformMachine", "run_lease").Inc()

	want := `
# HELP captf_jobs_active Jobs that have not finished, from the Job cache at scrape time.
# TYPE captf_jobs_active gauge
captf_jobs_active{kind="TerraformCluster",op="apply"} 2
# HELP captf_jobs_total Finished Jobs, counted once each at bookkeeping.
# TYPE captf_jobs_total counter
captf_jobs_total{kind="TerraformCluster",op="apply",result="deadline"} 1
captf_jobs_total{kind="TerraformCluster",op="apply",result="succeeded"} 1
# HELP captf_reconcile_op_decisions_total Decisions of reconcile passes; op is none when nothing started.
# TYPE captf_reconcile_op_decisions_total counter
captf_reconcile_op_decisions_total{kind="TerraformMachine",op="none",reason="UpToDate"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "captf_jobs_active", "captf_jobs_total", "captf_reconcile_op_decisions_total"); err != nil {
		t.Fatal(err)
	}
	// Every finished Job records its retry number, the failed one as well as the succeeded one.
	wantAttempts := `
# HELP captf_job_attempts Retry number of finished Jobs, each observed once at bookkeeping whatever its result: one plus the failed Jobs of the op since its last success.
# TYPE captf_job_attempts histogram
captf_job_attempts_bucket{kind="TerraformCluster",op="apply",le="1"} 1
captf_job_attempts_bucket{kind="TerraformCluster",op="apply",le="2"} 1
captf_job_attempts_bucket{kind="TerraformCluster",op="apply",le="3"} 2
captf_job_attempts_bucket{kind="TerraformCluster",op="apply",le="4"} 2
captf_job_attempts_bucket{kind="TerraformCluster",op="apply",le="5"} 2
captf_job_attempts_bucket{kind="TerraformCluster",op="apply",le="10"} 2
captf_job_attempts_bucket{kind="TerraformCluster",op="apply",le="20"} 2
captf_job_attempts_bucket{kind="TerraformCluster",op="apply",le="+Inf"} 2
captf_job_attempts_sum{kind="TerraformCluster",op="apply"} 4
captf_job_attempts_count{kind="TerraformCluster",op="apply"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(wantAttempts), "captf_job_attempts"); err != nil {
		t.Fatal(err)
	}
}

// TestStaleLockCountsStartAtZero: an alert on the increase of the count sees the first stale lock
// only when the series was there, at 0, before it.
func TestStaleLockCountsStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.ForceUnlocks.WithLabelValues("TerraformMachine").Inc()
	want := `
# HELP captf_lock_force_unlocks_total Stale state locks, left by a finished or vanished pod of the object's own Jobs, handed to the next Job to release; 0 for each kind from the start.
# TYPE captf_lock_force_unlocks_total counter
captf_lock_force_unlocks_total{kind="TerraformCluster"} 0
captf_lock_force_unlocks_total{kind="TerraformMachine"} 1
captf_lock_force_unlocks_total{kind="TerraformMachinePool"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "captf_lock_force_unlocks_total"); err != nil {
		t.Fatal(err)
	}
}

package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/captf/captf/jobs"
)

// TestStartedJobsAreCountedWithWhetherTheyRetry: captf_jobs_started_total counts each started
// Job once, and its retry label says whether the Job's retry number is above 1.
func TestStartedJobsAreCountedWithWhetherTheyRetry(t *testing.T) {
	const header = `
# HELP captf_jobs_started_total Jobs started, counted once each when created; retry is true for a Job that retries a failure: its retry number (see captf_job_attempts) is above 1.
# TYPE captf_jobs_started_total counter
`
	tests := []struct {
		name  string
		retry int
		want  string
	}{
		{name: "a first try is not a retry", retry: 1, want: `captf_jobs_started_total{kind="TerraformCluster",op="apply",retry="false"} 1`},
		{name: "a Job after one failure is a retry", retry: 2, want: `captf_jobs_started_total{kind="TerraformCluster",op="apply",retry="true"} 1`},
		{name: "a Job after many failures is a retry", retry: 7, want: `captf_jobs_started_total{kind="TerraformCluster",op="apply",retry="true"} 1`},
		{name: "a retry number below 1, which no history gives, is not a retry", retry: 0, want: `captf_jobs_started_total{kind="TerraformCluster",op="apply",retry="false"} 1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m, err := New(reg, nil)
			if err != nil {
				t.Fatal(err)
			}
			m.Started(jobs.KindCluster, jobs.OpApply, tt.retry)
			if err := testutil.GatherAndCompare(reg, strings.NewReader(header+tt.want+"\n"), "captf_jobs_started_total"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestBackoffWindowsOpen: the gauge reports what the source counts at scrape time, every kind
// and op with 0 where nothing is counted, and nothing at all when the source cannot tell.
func TestBackoffWindowsOpen(t *testing.T) {
	tests := []struct {
		name string
		open func() map[[2]string]int
		// want are the non-zero series, "kind/op=value"; every other kind and op must be 0.
		want   map[string]float64
		absent bool
	}{
		{name: "no window open reports 0 for every kind and op", open: func() map[[2]string]int { return map[[2]string]int{} }, want: map[string]float64{}},
		{
			name: "open windows are reported by kind and op",
			open: func() map[[2]string]int {
				return map[[2]string]int{{"TerraformCluster", "apply"}: 2, {"TerraformMachine", "drift"}: 1}
			},
			want: map[string]float64{"TerraformCluster/apply": 2, "TerraformMachine/drift": 1},
		},
		{
			name: "a forged kind and op are counted as unknown",
			open: func() map[[2]string]int {
				return map[[2]string]int{{"Evil", "rm"}: 1, {"Other", "x"}: 2}
			},
			want: map[string]float64{Unknown + "/" + Unknown: 3},
		},
		{name: "a source that cannot tell gives no series", open: func() map[[2]string]int { return nil }, absent: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			if err := RegisterBackoff(reg, tt.open); err != nil {
				t.Fatal(err)
			}
			families, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			if tt.absent {
				if len(families) != 0 {
					t.Fatalf("series %v, want none", families)
				}
				return
			}
			got := map[string]float64{}
			for _, f := range families {
				for _, metric := range f.GetMetric() {
					var kind, op string
					for _, l := range metric.GetLabel() {
						switch l.GetName() {
						case "kind":
							kind = l.GetValue()
						case "op":
							op = l.GetValue()
						}
					}
					got[kind+"/"+op] = metric.GetGauge().GetValue()
				}
			}
			for _, kind := range []string{"TerraformCluster", "TerraformMachine", "TerraformMachinePool"} {
				for _, op := range jobs.Ops() {
					if _, ok := got[kind+"/"+string(op)]; !ok {
						t.Errorf("no series for %s/%s", kind, op)
					}
				}
			}
			for key, v := range got {
				if v != tt.want[key] {
					t.Errorf("%s = %v, want %v", key, v, tt.want[key])
				}
			}
		})
	}
}

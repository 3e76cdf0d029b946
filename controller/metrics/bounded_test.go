package metrics

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/captf/captf/jobs"
)

// TestForgedKindAndOpLabelsAddNoLabelValue: the kind and op of a Job come from its labels,
// which anyone who may write Jobs sets. Whatever they say, every series keeps its kind and op
// label values within captf's kinds and ops, "none" for a decision without op, and "unknown".
func TestForgedKindAndOpLabelsAddNoLabelValue(t *testing.T) {
	forged := strings.Repeat("x", 1<<10)
	tests := []struct {
		name   string
		active map[[2]string]int
		record func(m *Metrics)
		// want are the series expected, by name and "kind/op" in any order.
		want map[string][]string
	}{
		{
			name:   "active Jobs of a forged kind and op are counted as unknown",
			active: map[[2]string]int{{"Evil", "rm"}: 1, {forged, forged}: 2, {"", ""}: 3, {"TerraformCluster", "apply"}: 4},
			want: map[string][]string{"captf_jobs_active": {
				Unknown + "/" + Unknown, "TerraformCluster/apply",
			}},
		},
		{
			name:   "active Jobs of a known kind with a forged op keep their kind",
			active: map[[2]string]int{{"TerraformMachine", forged}: 1, {"TerraformMachine", "drift"}: 1},
			want: map[string][]string{"captf_jobs_active": {
				"TerraformMachine/" + Unknown, "TerraformMachine/drift",
			}},
		},
		{
			name: "a finished Job of a forged kind and op is counted as unknown",
			record: func(m *Metrics) {
				m.Finished(jobs.Kind(forged), jobs.Op(forged), jobs.OutcomeSucceeded, time.Minute, 1)
				m.Finished(jobs.KindCluster, jobs.Op("destroy-everything"), jobs.OutcomeFailed, time.Minute, 1)
				m.Finished(jobs.KindCluster, jobs.OpApply, jobs.Outcome(forged), time.Minute, 1)
			},
			want: map[string][]string{
				"captf_jobs_total":           {Unknown + "/" + Unknown, "TerraformCluster/" + Unknown, "TerraformCluster/apply"},
				"captf_job_duration_seconds": {Unknown + "/" + Unknown, "TerraformCluster/" + Unknown, "TerraformCluster/apply"},
				"captf_job_attempts":         {Unknown + "/" + Unknown, "TerraformCluster/" + Unknown, "TerraformCluster/apply"},
			},
		},
		{
			name: "a started Job of a forged kind and op is counted as unknown",
			record: func(m *Metrics) {
				m.Started(jobs.Kind(forged), jobs.Op(forged), 1)
				m.Started(jobs.KindMachine, jobs.Op(forged), 2)
			},
			want: map[string][]string{"captf_jobs_started_total": {Unknown + "/" + Unknown, "TerraformMachine/" + Unknown}},
		},
		{
			name: "a decision with a forged op is counted as unknown, one without op as none",
			record: func(m *Metrics) {
				m.Decided(jobs.KindMachinePool, jobs.Op(forged), "UpToDate")
				m.Decided(jobs.Kind(forged), "", "UpToDate")
			},
			want: map[string][]string{"captf_reconcile_op_decisions_total": {
				Unknown + "/none", "TerraformMachinePool/" + Unknown,
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m, err := New(reg, func() map[[2]string]int { return tt.active })
			if err != nil {
				t.Fatal(err)
			}
			if tt.record != nil {
				tt.record(m)
			}
			families, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string][]string{}
			for _, f := range families {
				for _, metric := range f.GetMetric() {
					var kind, op string
					for _, l := range metric.GetLabel() {
						switch l.GetName() {
						case "kind":
							kind = l.GetValue()
						case "op":
							op = l.GetValue()
						case "result":
							if !knownResult(l.GetValue()) {
								t.Errorf("%s has result %.80q", f.GetName(), l.GetValue())
							}
						}
					}
					got[f.GetName()] = append(got[f.GetName()], kind+"/"+op)
				}
			}
			// Every registry starts with these, whatever was recorded.
			want := map[string][]string{"captf_lock_force_unlocks_total": {"TerraformCluster/", "TerraformMachine/", "TerraformMachinePool/"}}
			maps.Copy(want, tt.want)
			for name, series := range want {
				slices.Sort(series)
				if !slices.Equal(got[name], series) { // Gather sorts series by label values
					t.Errorf("%s series %.300q, want %q", name, got[name], series)
				}
			}
			for name, series := range got {
				if _, ok := want[name]; !ok {
					t.Errorf("unexpected series %s %.300q", name, series)
				}
			}
		})
	}
}

// knownResult reports whether a result label value is one of the fixed set.
func knownResult(v string) bool {
	switch v {
	case "succeeded", "failed", "deadline", "interrupted", "blocked", "plan_changed", Unknown:
		return true
	}
	return false
}

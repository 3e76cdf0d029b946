package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestPlansAwaitingApproval: the plan gauges report, per kind, how many objects have a plan
// waiting for approval and how long the oldest has waited, from what the source tells at scrape
// time.
func TestPlansAwaitingApproval(t *testing.T) {
	const header = `
# HELP captf_plan_approval_wait_seconds How long the oldest plan of the kind awaiting approval has waited, from its condition's lastTransitionTime, at scrape time; 0 when no plan waits.
# TYPE captf_plan_approval_wait_seconds gauge
`
	const countHeader = `
# HELP captf_plans_awaiting_approval Objects whose plan waits for a person's approval (ApplyJobSucceeded Unknown, reason PlanAwaitingApproval or PlanChanged), from the object cache at scrape time; 0 for a kind with spec.applyPolicy and no plan waiting.
# TYPE captf_plans_awaiting_approval gauge
`
	tests := []struct {
		name  string
		waits func() map[string]PlanWaits
		want  string
	}{
		{
			name:  "a kind with no plan waiting reports 0 plans and 0 seconds",
			waits: func() map[string]PlanWaits { return map[string]PlanWaits{"TerraformCluster": {}} },
			want: header + `captf_plan_approval_wait_seconds{kind="TerraformCluster"} 0
` + countHeader + `captf_plans_awaiting_approval{kind="TerraformCluster"} 0
`,
		},
		{
			name: "waiting plans are counted and the oldest wait is reported in seconds",
			waits: func() map[string]PlanWaits {
				return map[string]PlanWaits{"TerraformCluster": {Count: 3, Longest: 90 * time.Minute}}
			},
			want: header + `captf_plan_approval_wait_seconds{kind="TerraformCluster"} 5400
` + countHeader + `captf_plans_awaiting_approval{kind="TerraformCluster"} 3
`,
		},
		{
			name: "each kind is reported on its own",
			waits: func() map[string]PlanWaits {
				return map[string]PlanWaits{"TerraformCluster": {Count: 1, Longest: time.Minute}, "TerraformMachinePool": {}}
			},
			want: header + `captf_plan_approval_wait_seconds{kind="TerraformCluster"} 60
captf_plan_approval_wait_seconds{kind="TerraformMachinePool"} 0
` + countHeader + `captf_plans_awaiting_approval{kind="TerraformCluster"} 1
captf_plans_awaiting_approval{kind="TerraformMachinePool"} 0
`,
		},
		{
			name: "a wait from a transition time ahead of the clock is 0 seconds",
			waits: func() map[string]PlanWaits {
				return map[string]PlanWaits{"TerraformCluster": {Count: 1, Longest: -time.Minute}}
			},
			want: header + `captf_plan_approval_wait_seconds{kind="TerraformCluster"} 0
` + countHeader + `captf_plans_awaiting_approval{kind="TerraformCluster"} 1
`,
		},
		{
			name: "a kind with no plan waiting reports 0 seconds whatever the source says",
			waits: func() map[string]PlanWaits {
				return map[string]PlanWaits{"TerraformCluster": {Longest: time.Hour}}
			},
			want: header + `captf_plan_approval_wait_seconds{kind="TerraformCluster"} 0
` + countHeader + `captf_plans_awaiting_approval{kind="TerraformCluster"} 0
`,
		},
		{
			name: "forged kinds are merged into unknown: counts add up, the longest wait wins",
			waits: func() map[string]PlanWaits {
				return map[string]PlanWaits{
					"Evil":                     {Count: 1, Longest: time.Minute},
					strings.Repeat("x", 1<<10): {Count: 2, Longest: time.Hour},
				}
			},
			want: header + `captf_plan_approval_wait_seconds{kind="unknown"} 3600
` + countHeader + `captf_plans_awaiting_approval{kind="unknown"} 3
`,
		},
		{
			name:  "a source that cannot tell leaves the series absent",
			waits: func() map[string]PlanWaits { return nil },
			want:  "",
		},
		{
			name:  "no source leaves the series absent",
			waits: nil,
			want:  "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			if err := RegisterPlans(reg, tt.waits); err != nil {
				t.Fatal(err)
			}
			if err := testutil.GatherAndCompare(reg, strings.NewReader(tt.want),
				"captf_plans_awaiting_approval", "captf_plan_approval_wait_seconds"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// recorder is a Registerer that keeps what it is given.
type recorder struct{ collectors []prometheus.Collector }

func (r *recorder) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	r.collectors = append(r.collectors, cs...)
}

func (r *recorder) Unregister(prometheus.Collector) bool { return false }

// TestEveryReferenceSeriesIsRegistered: Reference documents the series and the alerting rules are
// checked against it, so New, RegisterPlans and RegisterBackoff together register exactly the
// series it lists.
func TestEveryReferenceSeriesIsRegistered(t *testing.T) {
	reg := &recorder{}
	if _, err := New(reg, nil); err != nil {
		t.Fatal(err)
	}
	if err := RegisterPlans(reg, nil); err != nil {
		t.Fatal(err)
	}
	if err := RegisterBackoff(reg, nil); err != nil {
		t.Fatal(err)
	}
	descs := make(chan *prometheus.Desc, 64)
	for _, c := range reg.collectors {
		c.Describe(descs)
	}
	close(descs)
	registered := map[string]bool{}
	for d := range descs {
		registered[descName(t, d)] = true
	}
	for _, s := range Reference {
		if !registered[s.Name] {
			t.Errorf("%s is in Reference but not registered", s.Name)
		}
		delete(registered, s.Name)
	}
	for name := range registered {
		t.Errorf("%s is registered but not in Reference", name)
	}
}

// descName is the series name of d; a Desc tells it only in its String form.
func descName(t *testing.T, d *prometheus.Desc) string {
	t.Helper()
	_, rest, ok := strings.Cut(d.String(), `fqName: "`)
	name, _, ok2 := strings.Cut(rest, `"`)
	if !ok || !ok2 {
		t.Fatalf("cannot read the name of %s", d)
	}
	return name
}

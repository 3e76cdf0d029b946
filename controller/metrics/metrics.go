// Package metrics defines the captf_* Prometheus series of the controller. Labels are bounded:
// kind, op, result and reason come from fixed sets, never from object names.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/captf/captf/jobs"
)

// Metrics are the controller's series.
type Metrics struct {
	// JobsTotal counts finished Jobs once each, by kind, op and result.
	JobsTotal *prometheus.CounterVec
	// JobDuration observes how long finished Jobs ran.
	JobDuration *prometheus.HistogramVec
	// JobAttempts observes the retry number of each succeeded Job.
	JobAttempts *prometheus.HistogramVec
	// Decisions counts the decisions of reconcile passes by kind, op (none) and reason.
	Decisions *prometheus.CounterVec
	// LeaseWaits counts passes that could not take a run Lease.
	LeaseWaits *prometheus.CounterVec
}

// New creates the series and registers them, and the active-Jobs gauge computed at scrape time
// from active, on reg.
func New(reg prometheus.Registerer, active func() map[[2]string]int) (*Metrics, error) {
	m := &Metrics{
		JobsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "captf_jobs_total", Help: "Finished Jobs, counted once each at bookkeeping.",
		}, []string{"kind", "op", "result"}),
		JobDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "captf_job_duration_seconds", Help: "How long finished Jobs ran, from start to finish.",
			Buckets: []float64{15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200},
		}, []string{"kind", "op", "result"}),
		JobAttempts: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "captf_job_attempts", Help: "Retry number of succeeded Jobs: one plus the failed Jobs of the op since its last success.",
			Buckets: []float64{1, 2, 3, 4, 5, 10, 20},
		}, []string{"kind", "op"}),
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "captf_reconcile_op_decisions_total", Help: "Decisions of reconcile passes; op is none when nothing started.",
		}, []string{"kind", "op", "reason"}),
		LeaseWaits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "captf_lease_waits_total", Help: "Passes that waited for a run Lease held by another Job.",
		}, []string{"kind", "reason"}),
	}
	collectors := []prometheus.Collector{m.JobsTotal, m.JobDuration, m.JobAttempts, m.Decisions, m.LeaseWaits, &activeCollector{active: active}}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Finished records a bookkept Job.
func (m *Metrics) Finished(kind jobs.Kind, op jobs.Op, outcome jobs.Outcome, ran time.Duration, retry int) {
	result := outcome.MetricResult()
	m.JobsTotal.WithLabelValues(string(kind), string(op), result).Inc()
	if ran > 0 {
		m.JobDuration.WithLabelValues(string(kind), string(op), result).Observe(ran.Seconds())
	}
	if outcome.Succeeded() {
		m.JobAttempts.WithLabelValues(string(kind), string(op)).Observe(float64(retry))
	}
}

// Decided records a decision; op is empty when nothing starts.
func (m *Metrics) Decided(kind jobs.Kind, op jobs.Op, reason string) {
	if op == "" {
		op = "none"
	}
	m.Decisions.WithLabelValues(string(kind), string(op), reason).Inc()
}

var activeDesc = prometheus.NewDesc("captf_jobs_active", "Jobs that have not finished, from the Job cache at scrape time.", []string{"kind", "op"}, nil)

// activeCollector reports the running Jobs at scrape time, so the gauge can never drift from the
// Jobs that exist.
type activeCollector struct {
	active func() map[[2]string]int
}

func (c *activeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- activeDesc }

func (c *activeCollector) Collect(ch chan<- prometheus.Metric) {
	if c.active == nil {
		return
	}
	for key, n := range c.active() {
		ch <- prometheus.MustNewConstMetric(activeDesc, prometheus.GaugeValue, float64(n), key[0], key[1])
	}
}

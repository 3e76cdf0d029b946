// Package metrics defines the captf_* Prometheus series of the controller. Labels are bounded:
// kind, op, result and reason come from fixed sets, never from object names or from the labels
// whoever may write Jobs put on them.
package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/jobs"
)

// Metrics are the controller's series.
type Metrics struct {
	// JobsStarted counts the Jobs the controller started, by kind, op and whether they retry a
	// failure.
	JobsStarted *prometheus.CounterVec
	// JobsTotal counts finished Jobs once each, by kind, op and result.
	JobsTotal *prometheus.CounterVec
	// JobDuration observes how long finished Jobs ran.
	JobDuration *prometheus.HistogramVec
	// JobAttempts observes the retry number of each finished Job.
	JobAttempts *prometheus.HistogramVec
	// Decisions counts the decisions of reconcile passes by kind, op (none) and reason.
	Decisions *prometheus.CounterVec
	// LeaseWaits counts passes that could not take a run Lease.
	LeaseWaits *prometheus.CounterVec
	// ForceUnlocks counts stale state locks handed to a Job to release.
	ForceUnlocks *prometheus.CounterVec
}

// Series describes one series; the collectors and docs/metrics-events.md are both made from
// Reference, so the documentation cannot drift from the code.
type Series struct {
	Name    string
	Type    string
	Labels  []string
	Help    string
	Buckets []float64
}

// Reference lists every series of the controller.
var Reference = []Series{
	{Name: "captf_jobs_started_total", Type: "counter", Labels: []string{"kind", "op", "retry"},
		Help: "Jobs started, counted once each when created; retry is true for a Job that retries a failure: its retry number (see captf_job_attempts) is above 1."},
	{Name: "captf_jobs_total", Type: "counter", Labels: []string{"kind", "op", "result"},
		Help: "Finished Jobs, counted once each at bookkeeping."},
	{Name: "captf_job_duration_seconds", Type: "histogram", Labels: []string{"kind", "op", "result"},
		Help: "How long finished Jobs ran, from start to finish.", Buckets: []float64{15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200}},
	{Name: "captf_job_attempts", Type: "histogram", Labels: []string{"kind", "op"},
		Help: "Retry number of finished Jobs, each observed once at bookkeeping whatever its result: one plus the failed Jobs of the op since its last success.", Buckets: []float64{1, 2, 3, 4, 5, 10, 20}},
	{Name: "captf_jobs_active", Type: "gauge", Labels: []string{"kind", "op"},
		Help: "Jobs that have not finished, from the Job cache at scrape time."},
	{Name: "captf_reconcile_op_decisions_total", Type: "counter", Labels: []string{"kind", "op", "reason"},
		Help: "Decisions of reconcile passes; op is none when nothing started."},
	{Name: "captf_lease_waits_total", Type: "counter", Labels: []string{"kind", "reason"},
		Help: "Passes that waited for a run Lease held by another Job."},
	{Name: "captf_lock_force_unlocks_total", Type: "counter", Labels: []string{"kind"},
		Help: "Stale state locks, left by a finished or vanished pod of the object's own Jobs, handed to the next Job to release; 0 for each kind from the start."},
	{Name: "captf_plans_awaiting_approval", Type: "gauge", Labels: []string{"kind"},
		Help: "Objects whose plan waits for a person's approval (ApplyJobSucceeded Unknown, reason PlanAwaitingApproval or PlanChanged), from the object cache at scrape time; 0 for a kind with spec.applyPolicy and no plan waiting."},
	{Name: "captf_plan_approval_wait_seconds", Type: "gauge", Labels: []string{"kind"},
		Help: "How long the oldest plan of the kind awaiting approval has waited, from its condition's lastTransitionTime, at scrape time; 0 when no plan waits."},
	{Name: "captf_backoff_windows_open", Type: "gauge", Labels: []string{"kind", "op"},
		Help: "Objects with an op inside its backoff window after failed Jobs (the op does not run again before the window ends), from the Job and object caches at scrape time; 0 for every kind and op with none."},
}

func find(name string) Series {
	for _, s := range Reference {
		if s.Name == name {
			return s
		}
	}
	panic("metrics: no series " + name) // a typo in this file; caught by every test
}

func counter(name string) *prometheus.CounterVec {
	s := find(name)
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: s.Name, Help: s.Help}, s.Labels)
}

func histogram(name string) *prometheus.HistogramVec {
	s := find(name)
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: s.Name, Help: s.Help, Buckets: s.Buckets}, s.Labels)
}

// New creates the series and registers them, and the active-Jobs gauge computed at scrape time
// from active, on reg.
func New(reg prometheus.Registerer, active func() map[[2]string]int) (*Metrics, error) {
	m := &Metrics{
		JobsStarted:  counter("captf_jobs_started_total"),
		JobsTotal:    counter("captf_jobs_total"),
		JobDuration:  histogram("captf_job_duration_seconds"),
		JobAttempts:  histogram("captf_job_attempts"),
		Decisions:    counter("captf_reconcile_op_decisions_total"),
		LeaseWaits:   counter("captf_lease_waits_total"),
		ForceUnlocks: counter("captf_lock_force_unlocks_total"),
	}
	// Each kind's stale-lock count starts at 0: a rate or increase cannot see the first
	// increment of a series that appears at 1, and a stale lock is rare enough that the first one
	// may be the only one.
	for _, kind := range infrav1.Kinds {
		m.ForceUnlocks.WithLabelValues(kind.Kind)
	}
	activeSeries := find("captf_jobs_active")
	collectors := []prometheus.Collector{m.JobsStarted, m.JobsTotal, m.JobDuration, m.JobAttempts, m.Decisions, m.LeaseWaits, m.ForceUnlocks,
		&countCollector{counts: active, desc: prometheus.NewDesc(activeSeries.Name, activeSeries.Help, activeSeries.Labels, nil)}}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// PlanWaits are the plans of one kind that wait for approval at scrape time.
type PlanWaits struct {
	// Count is how many objects of the kind have a plan waiting.
	Count int
	// Longest is how long the oldest of those plans has waited.
	Longest time.Duration
}

// RegisterPlans registers on reg the gauges of plans awaiting approval, computed at scrape time
// from waits. waits reports, by kind, every kind whose objects can wait for approval, with a
// zero PlanWaits for a kind that has none waiting; it returns nil when it cannot tell (e.g. the
// cache fails), and the series are then absent rather than a misleading 0.
func RegisterPlans(reg prometheus.Registerer, waits func() map[string]PlanWaits) error {
	count, wait := find("captf_plans_awaiting_approval"), find("captf_plan_approval_wait_seconds")
	return reg.Register(&plansCollector{
		waits: waits,
		count: prometheus.NewDesc(count.Name, count.Help, count.Labels, nil),
		wait:  prometheus.NewDesc(wait.Name, wait.Help, wait.Labels, nil),
	})
}

// RegisterBackoff registers on reg the gauge of backoff windows open, computed at scrape time
// from open: the objects inside an op's backoff window, by kind and op as KindLabel and OpLabel
// report them. Every kind and op is reported, 0 when none is counted; open returns nil when it
// cannot tell (e.g. a cache has not synced), and the series are then absent rather than a
// misleading 0.
func RegisterBackoff(reg prometheus.Registerer, open func() map[[2]string]int) error {
	s := find("captf_backoff_windows_open")
	var zeros [][2]string
	for _, kind := range infrav1.Kinds {
		for _, op := range jobs.Ops() {
			zeros = append(zeros, [2]string{kind.Kind, string(op)})
		}
	}
	return reg.Register(&countCollector{counts: open, zeros: zeros, desc: prometheus.NewDesc(s.Name, s.Help, s.Labels, nil)})
}

// Unknown is the kind or op label of a Job whose own label is not one of captf's, such as a
// Job someone else labeled: the series stay within the fixed sets whatever a Job says.
const Unknown = "unknown"

// KindLabel is the kind label value of kind: the kind itself when it is one of captf's,
// Unknown otherwise.
func KindLabel(kind jobs.Kind) string {
	if !kind.Valid() {
		return Unknown
	}
	return string(kind)
}

// OpLabel is the op label value of op: the op itself when it is one of captf's, Unknown
// otherwise.
func OpLabel(op jobs.Op) string {
	if !op.Valid() {
		return Unknown
	}
	return string(op)
}

// Started records a Job the controller created; retry is the Job's retry number (see
// jobs.RetryNumber), the value captf_job_attempts records once it finishes.
func (m *Metrics) Started(kind jobs.Kind, op jobs.Op, retry int) {
	m.JobsStarted.WithLabelValues(KindLabel(kind), OpLabel(op), strconv.FormatBool(retry > 1)).Inc()
}

// Finished records a bookkept Job.
func (m *Metrics) Finished(kind jobs.Kind, op jobs.Op, outcome jobs.Outcome, ran time.Duration, retry int) {
	k, o, result := KindLabel(kind), OpLabel(op), outcome.MetricResult()
	if result == "" {
		result = Unknown
	}
	m.JobsTotal.WithLabelValues(k, o, result).Inc()
	if ran > 0 {
		m.JobDuration.WithLabelValues(k, o, result).Observe(ran.Seconds())
	}
	m.JobAttempts.WithLabelValues(k, o).Observe(float64(retry))
}

// Decided records a decision; op is empty when nothing starts.
func (m *Metrics) Decided(kind jobs.Kind, op jobs.Op, reason string) {
	o := "none"
	if op != "" {
		o = OpLabel(op)
	}
	m.Decisions.WithLabelValues(KindLabel(kind), o, reason).Inc()
}

// countCollector reports a gauge by kind and op computed at scrape time (the running Jobs, the
// backoff windows open), so it can never drift from the objects it counts. The counts come by
// kind and op as the Jobs' labels say; it reports them by KindLabel and OpLabel, with 0 for each
// of zeros that has no count.
type countCollector struct {
	counts func() map[[2]string]int
	zeros  [][2]string
	desc   *prometheus.Desc
}

func (c *countCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *countCollector) Collect(ch chan<- prometheus.Metric) {
	if c.counts == nil {
		return
	}
	read := c.counts()
	if read == nil {
		return
	}
	counts := map[[2]string]int{}
	for _, key := range c.zeros {
		counts[key] = 0
	}
	for key, n := range read {
		counts[[2]string{KindLabel(jobs.Kind(key[0])), OpLabel(jobs.Op(key[1]))}] += n
	}
	for key, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), key[0], key[1])
	}
}

// plansCollector reports the plans awaiting approval at scrape time, so the gauges follow the
// objects' conditions without any bookkeeping of their own. Kinds are reported by KindLabel.
type plansCollector struct {
	waits       func() map[string]PlanWaits
	count, wait *prometheus.Desc
}

func (c *plansCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.count
	ch <- c.wait
}

func (c *plansCollector) Collect(ch chan<- prometheus.Metric) {
	if c.waits == nil {
		return
	}
	byKind := map[string]PlanWaits{}
	for kind, w := range c.waits() {
		label := KindLabel(jobs.Kind(kind))
		merged := byKind[label]
		merged.Count += w.Count
		if w.Count > 0 {
			// Starting from zero also makes a transition time ahead of this clock (skew between
			// the API server and the controller) no wait rather than a negative one.
			merged.Longest = max(merged.Longest, w.Longest)
		}
		byKind[label] = merged
	}
	for kind, w := range byKind {
		ch <- prometheus.MustNewConstMetric(c.count, prometheus.GaugeValue, float64(w.Count), kind)
		ch <- prometheus.MustNewConstMetric(c.wait, prometheus.GaugeValue, w.Longest.Seconds(), kind)
	}
}

package jobs

import (
	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"sort"
	"time"

	batchv1 "k8s.io/api/batch/v1"
)

// History limits, as in spec.jobs.
const (
	// DefaultHistoryLimit applies when a history limit is unset.
	DefaultHistoryLimit = 3
	// MaxHistoryLimit is the largest history limit the API admits.
	MaxHistoryLimit = 100
)

// Backoff timing. It is compiled in: there is no flag and no way to skip it.
const (
	// BackoffBase is the delay after the first failure.
	BackoffBase = time.Minute
	// BackoffCap is the longest delay, and the delay once the failures reach the failed limit.
	BackoffCap = 10 * time.Minute
)

// Limits are an object's Job history limits, spec.jobs.successfulJobsHistoryLimit and
// spec.jobs.failedJobsHistoryLimit. Nil means the default.
type Limits struct {
	// SuccessfulJobsHistoryLimit is how many successful Jobs of each op are kept.
	SuccessfulJobsHistoryLimit *int32
	// FailedJobsHistoryLimit is how many unsuccessful Jobs of each op are kept; it also bounds
	// the backoff delay and the remediation cap.
	FailedJobsHistoryLimit *int32
}

// Successful returns the successful limit: DefaultHistoryLimit when unset, clamped to
// 0..MaxHistoryLimit.
func (l Limits) Successful() int { return resolveLimit(l.SuccessfulJobsHistoryLimit) }

// Failed returns the failed limit: DefaultHistoryLimit when unset, clamped to 0..MaxHistoryLimit.
func (l Limits) Failed() int { return resolveLimit(l.FailedJobsHistoryLimit) }

// failureCap returns the failed limit as the backoff and remediation caps use it: a limit of 0
// counts like 1, because pruning always keeps the newest unresolved failure.
func (l Limits) failureCap() int { return max(l.Failed(), 1) }

func resolveLimit(limit *int32) int {
	if limit == nil {
		return DefaultHistoryLimit
	}
	return min(max(int(*limit), 0), MaxHistoryLimit)
}

// OpJobs returns the Jobs of op, newest first, as pointers into jobs; none for an unknown op.
//
// Newest means the highest attempt: attempts only grow within an op, and unlike timestamps they
// cannot tie or skew between Jobs created within one second. Equal attempts, which only a
// hand-made or unparsable attempt label can produce, fall back to the later creation time and
// then the greater name, so the order is total.
func OpJobs(jobs []batchv1.Job, op Op) []*batchv1.Job {
	if !op.Valid() {
		return nil
	}
	var out []*batchv1.Job
	for i := range jobs {
		if OpOf(&jobs[i]) == op {
			out = append(out, &jobs[i])
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return newer(out[i], out[j]) })
	return out
}

// newer reports whether a sorts before b in OpJobs' newest-first order.
func newer(a, b *batchv1.Job) bool {
	if x, y := AttemptOf(a), AttemptOf(b); x != y {
		return x > y
	}
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return b.CreationTimestamp.Before(&a.CreationTimestamp)
	}
	return a.Name > b.Name
}

// ActiveJob returns the newest Job of all that has not finished, or nil when every one has.
// Newest means the latest creation time, then OpJobs' order for Jobs created in the same second
// (a higher attempt, then the greater name).
//
// The runs of one object never overlap, so normally at most one Job is unfinished. When more
// are (a pass that acted on a stale cache started another, or someone made one by hand), the
// newest is the one started last: status.activeJob then follows the run most recently begun
// rather than an older straggler. And since the choice depends on the Jobs alone, never on the
// order a cache happens to list them in, every reader names the same Job.
func ActiveJob(all []batchv1.Job) *batchv1.Job {
	var active *batchv1.Job
	for i := range all {
		j := &all[i]
		if OutcomeOf(j).Finished() {
			continue
		}
		if active == nil || active.CreationTimestamp.Before(&j.CreationTimestamp) ||
			active.CreationTimestamp.Equal(&j.CreationTimestamp) && newer(j, active) {
			active = j
		}
	}
	return active
}

// NewestSuccess returns the newest successful Job of op in OpJobs' order, nil when op has
// none, and when it finished (see FinishedAt). ok is false when there is no success or the
// newest one has no recorded finish: an older success never stands in for the newest.
func NewestSuccess(all []batchv1.Job, op Op) (job *batchv1.Job, finished time.Time, ok bool) {
	for _, j := range OpJobs(all, op) {
		if OutcomeOf(j).Succeeded() {
			finished, ok = FinishedAt(j)
			return j, finished, ok
		}
	}
	return nil, time.Time{}, false
}

// NextAttempt returns one more than the highest attempt among the retained Jobs of op, whatever
// their outcome, and 1 when there are none. It is not a failure count: a count would reuse a
// pruned attempt's name (a1 to a5 failed, a3 to a5 kept: a count gives a4, this gives a6), and
// the name of a retained success when an apply repeats the same inputs. It saturates at
// MaxAttempt; AttemptOf reads any higher label as no attempt.
func NextAttempt(jobs []batchv1.Job, op Op) int32 {
	var highest int32
	for _, j := range OpJobs(jobs, op) {
		highest = max(highest, AttemptOf(j))
	}
	return min(highest+1, MaxAttempt)
}

// FailureStreak returns the Jobs counted as consecutive failures of op, newest first: walking the
// op's finished Jobs from the newest, it collects those whose outcome CountsAsFailure and stops
// at the first success. Interrupted, blocked and plan-changed Jobs are passed over, neither
// counted nor ending the streak. Each op counts alone, so a failing drift check never delays an
// apply.
func FailureStreak(jobs []batchv1.Job, op Op) []*batchv1.Job {
	return streak(OpJobs(jobs, op))
}

// streak collects counted failures from newest-first Jobs of one op until a success.
func streak(newestFirst []*batchv1.Job) []*batchv1.Job {
	var out []*batchv1.Job
	for _, j := range newestFirst {
		o := OutcomeOf(j)
		if o.Succeeded() {
			break
		}
		if o.CountsAsFailure() {
			out = append(out, j)
		}
	}
	return out
}

// RetryNumber returns the retry number of job, the value captf_job_attempts records: one plus
// the counted failures of its op that are older than it and newer than the op's last success
// before it. It works for any retained Job, so the API can show it for old runs too. jobs are
// the retained Jobs of the same object; job need not be among them, and replaces the Job of its
// name when it is.
func RetryNumber(job *batchv1.Job, jobs []batchv1.Job) int {
	opJobs := OpJobs(replacingJob(jobs, *job), OpOf(job))
	for i, n := range retryNumbers(opJobs) {
		if opJobs[i].Name == job.Name {
			return n
		}
	}
	return 1
}

// retryNumbers returns the retry number of each of one op's newest-first Jobs, index for index:
// walking from the oldest, a success resets the count of failures and a counted failure adds
// one; each Job's number is one plus the count of the Jobs older than it. This is the length of
// the failure streak (see streak) of the older Jobs, in one pass for all.
func retryNumbers(newestFirst []*batchv1.Job) []int {
	out := make([]int, len(newestFirst))
	failures := 0
	for i := len(newestFirst) - 1; i >= 0; i-- {
		out[i] = 1 + failures
		switch o := OutcomeOf(newestFirst[i]); {
		case o.Succeeded():
			failures = 0
		case o.CountsAsFailure():
			failures++
		}
	}
	return out
}

// BackoffDelay returns the delay after failures consecutive failures of an op:
// min(BackoffBase·2^(failures-1), BackoffCap), and BackoffCap at once when failures reach the
// failed limit (a limit below 1 counts as 1). Pruning keeps at most the limit's worth of
// failures, so reaching it means "at least that many". No failures, no delay.
func BackoffDelay(failures int, limits Limits) time.Duration {
	if failures <= 0 {
		return 0
	}
	if failures >= limits.failureCap() {
		return BackoffCap
	}
	delay := BackoffBase
	// Doubling stops at the cap, so a large count cannot overflow.
	for i := 1; i < failures && delay < BackoffCap; i++ {
		delay *= 2
	}
	return min(delay, BackoffCap)
}

// BackoffWindow is the wait after an op's failure streak.
type BackoffWindow struct {
	// Failures is the length of the streak; see FailureStreak.
	Failures int
	// Delay is BackoffDelay of Failures.
	Delay time.Duration
	// RetryAfter is when the newest counted failure finished, plus Delay.
	RetryAfter time.Time
}

// Backoff returns op's backoff window and whether now is inside it. With no counted failure
// there is no window (the zero value, false). The window runs from when the newest counted
// failure finished; a Job without a recorded finish counts from its start instead.
func Backoff(jobs []batchv1.Job, op Op, limits Limits, now time.Time) (BackoffWindow, bool) {
	failures := FailureStreak(jobs, op)
	if len(failures) == 0 {
		return BackoffWindow{}, false
	}
	w := backoffWindow(failures, limits)
	return w, now.Before(w.RetryAfter)
}

// backoffWindow computes the window of a non-empty streak, newest first.
func backoffWindow(failures []*batchv1.Job, limits Limits) BackoffWindow {
	anchor, ok := FinishedAt(failures[0])
	if !ok {
		anchor, _ = StartedAt(failures[0])
	}
	delay := BackoffDelay(len(failures), limits)
	return BackoffWindow{Failures: len(failures), Delay: delay, RetryAfter: anchor.Add(delay)}
}

// RemediationFailures returns the remediation count: the apply Jobs whose outcome
// CountsAsFailure and that finished strictly after lastDriftCheck (the last successful drift
// check; zero counts all), walking apply Jobs newest first and stopping at an apply success. Blocked,
// plan-changed and interrupted applies do not count. A failure without a recorded finish
// counts, which errs toward waiting for the next drift check over remediating in a loop.
func RemediationFailures(jobs []batchv1.Job, lastDriftCheck time.Time) int {
	n := 0
	for _, j := range FailureStreak(jobs, OpApply) {
		finished, ok := FinishedAt(j)
		// Strictly after, as seed 001 says: a failure finishing in the check's second is taken
		// as part of the history the check already saw.
		if !ok || lastDriftCheck.IsZero() || finished.After(lastDriftCheck) {
			n++
		}
	}
	return n
}

// RemediationAllowed reports whether a drift-remediation apply may start: only while the
// remediation count is below the failed limit, at least 1. At the cap the drift stays pending
// until a later successful drift check moves lastDriftCheck.
func RemediationAllowed(jobs []batchv1.Job, lastDriftCheck time.Time, limits Limits) bool {
	return RemediationFailures(jobs, lastDriftCheck) < limits.failureCap()
}

// LimitsOf reads the history limits of an object's Job policy.
func LimitsOf(policy infrav1.JobPolicy) Limits {
	return Limits{SuccessfulJobsHistoryLimit: policy.SuccessfulJobsHistoryLimit, FailedJobsHistoryLimit: policy.FailedJobsHistoryLimit}
}

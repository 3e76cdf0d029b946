package jobs

import (
	"math"
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
)

func TestNextAttempt(t *testing.T) {
	tests := []struct {
		name string
		jobs []batchv1.Job
		op   Op
		want int32
	}{
		{"the first Job of an op is attempt 1", nil, OpApply, 1},
		{"the attempt is one more than the highest retained attempt of the op", jobs(mkJob(OpApply, 1, succeeded), mkJob(OpApply, 2, failed)), OpApply, 3},
		{
			"a1 to a5 failed and the newest three kept: the next is a6, never a4",
			jobs(mkJob(OpApply, 3, failed), mkJob(OpApply, 4, failed), mkJob(OpApply, 5, failed)), OpApply, 6,
		},
		{"the attempt is not a failure count: a retained success raises it too", jobs(mkJob(OpApply, 7, succeeded)), OpApply, 8},
		{"whatever the outcome: running, blocked and interrupted Jobs raise it", jobs(mkJob(OpApply, 2, blocked), mkJob(OpApply, 3, interrupted), mkJob(OpApply, 4, running)), OpApply, 5},
		{"each op counts its own attempts", jobs(mkJob(OpRefresh, 40, failed), mkJob(OpApply, 2, succeeded)), OpApply, 3},
		{"an op with no retained Job starts at 1 whatever other ops did", jobs(mkJob(OpRefresh, 40, failed)), OpDrift, 1},
		{"a Job with a garbage attempt label raises nothing", jobs(mkJob(OpApply, 2, failed), mkJob(OpApply, 9, failed, label(LabelAttempt, "x"))), OpApply, 3},
		{"the attempt saturates at MaxAttempt instead of growing past it", jobs(mkJob(OpApply, MaxAttempt, failed)), OpApply, MaxAttempt},
		{"an attempt label above MaxAttempt (a forged 2147483647) counts as none", jobs(mkJob(OpApply, math.MaxInt32, failed), mkJob(OpApply, 2, failed)), OpApply, 3},
		{"an unknown op has attempt 1", jobs(mkJob(OpApply, 4, failed, label(LabelOp, "x"))), Op("x"), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NextAttempt(tt.jobs, tt.op); got != tt.want {
				t.Errorf("NextAttempt() = %d, want %d", got, tt.want)
			}
		})
	}
}

// A new name never equals a retained one, which is why the attempt is max+1.
func TestNewNameNeverEqualsARetainedName(t *testing.T) {
	nameOf := func(op Op, attempt int32, hash, tick string) string {
		n, err := JobName(NameInputs{Kind: KindCluster, Name: "web", Op: op, Attempt: attempt, InputsHash: hash, Tick: tick})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	tests := []struct {
		name     string
		retained []batchv1.Job
		op       Op
		hash     string
	}{
		{
			"an apply repeating the inputs of a retained success gets a new name",
			jobs(mkJob(OpApply, 1, succeeded, named(nameOf(OpApply, 1, "h", "")))), OpApply, "h",
		},
		{
			"after pruning a1 and a2, the next failure retry does not reuse a retained name",
			jobs(
				mkJob(OpApply, 3, failed, named(nameOf(OpApply, 3, "h", ""))),
				mkJob(OpApply, 4, failed, named(nameOf(OpApply, 4, "h", ""))),
				mkJob(OpApply, 5, failed, named(nameOf(OpApply, 5, "h", ""))),
			), OpApply, "h",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next := nameOf(tt.op, NextAttempt(tt.retained, tt.op), tt.hash, "")
			for _, j := range tt.retained {
				if j.Name == next {
					t.Errorf("the next name %q equals a retained Job's", next)
				}
			}
		})
	}
}

// A refresh retry has the same name until one succeeds: the name is a function of the state's
// hash, the last successful refresh and the attempt only, so a pass that repeats (a crash, or a
// cache that has not seen the Job yet) makes the same Job, and a success moves the tick.
func TestRefreshRetryNames(t *testing.T) {
	lastSuccess := at(5)
	src := NameSources{StateInputsHash: "h1:state", LastRefresh: lastSuccess}
	nameFor := func(retained []batchv1.Job, src NameSources) string {
		hash, tick := HashAndTick(OpRefresh, src)
		n, err := JobName(NameInputs{Kind: KindCluster, Name: "web", Op: OpRefresh, Attempt: NextAttempt(retained, OpRefresh), InputsHash: hash, Tick: tick})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	retained := jobs(mkJob(OpRefresh, 1, succeeded), mkJob(OpRefresh, 2, failed))

	t.Run("a retry computed twice before its Job is seen has the same name", func(t *testing.T) {
		if a, b := nameFor(retained, src), nameFor(retained, src); a != b {
			t.Errorf("names %q and %q differ", a, b)
		}
	})
	t.Run("failed retries keep the tick of the last success, so only the attempt moves", func(t *testing.T) {
		retry := append(slices.Clone(retained), mkJob(OpRefresh, 3, failed, named(nameFor(retained, src))))
		_, tickBefore := HashAndTick(OpRefresh, src)
		if _, tickAfter := HashAndTick(OpRefresh, src); tickAfter != tickBefore {
			t.Errorf("tick moved from %q to %q without a success", tickBefore, tickAfter)
		}
		if got := nameFor(retry, src); got == retry[2].Name {
			t.Errorf("retry reused the name %q of a retained Job", got)
		}
	})
	t.Run("a success moves the tick, so the next refresh has a new name even at the same attempt", func(t *testing.T) {
		moved := src
		moved.LastRefresh = at(50)
		// No retained Job, as after clusterctl move: only the tick tells the runs apart.
		if nameFor(nil, src) == nameFor(nil, moved) {
			t.Errorf("a new successful refresh did not change the name")
		}
	})
}

func TestFailureStreak(t *testing.T) {
	tests := []struct {
		name string
		jobs []batchv1.Job
		op   Op
		want []string
	}{
		{"no Jobs, no failures", nil, OpApply, []string{}},
		{"failures count newest first until a success of the op", jobs(mkJob(OpApply, 1, failed), mkJob(OpApply, 2, succeeded), mkJob(OpApply, 3, failed), mkJob(OpApply, 4, failed)), OpApply, []string{"apply-a4", "apply-a3"}},
		{"a deadline kill counts", jobs(mkJob(OpApply, 1, deadline), mkJob(OpApply, 2, deadlineInterrupted)), OpApply, []string{"apply-a2", "apply-a1"}},
		{"an interruption from outside does not count and does not end the streak", jobs(mkJob(OpApply, 1, failed), mkJob(OpApply, 2, interrupted)), OpApply, []string{"apply-a1"}},
		{"blocked and plan-changed between failures neither count nor end the streak", jobs(mkJob(OpApply, 1, failed), mkJob(OpApply, 2, blocked), mkJob(OpApply, 3, failed), mkJob(OpApply, 4, planChanged), mkJob(OpApply, 5, failed)), OpApply, []string{"apply-a5", "apply-a3", "apply-a1"}},
		{"an unreadable plan counts", jobs(mkJob(OpPlan, 1, planUnreadable)), OpPlan, []string{"plan-a1"}},
		{"a running Job is passed over", jobs(mkJob(OpApply, 1, failed), mkJob(OpApply, 2, running)), OpApply, []string{"apply-a1"}},
		{"a failing drift check never delays an apply", jobs(mkJob(OpDrift, 1, failed), mkJob(OpDrift, 2, failed), mkJob(OpApply, 1, succeeded)), OpApply, []string{}},
		{"a success of another op does not end the streak", jobs(mkJob(OpRefresh, 1, failed), mkJob(OpApply, 9, succeeded), mkJob(OpRefresh, 2, failed)), OpRefresh, []string{"refresh-a2", "refresh-a1"}},
		{"newest means the highest attempt, whatever the list order", jobs(mkJob(OpApply, 3, succeeded), mkJob(OpApply, 1, failed), mkJob(OpApply, 4, failed)), OpApply, []string{"apply-a4"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := names(FailureStreak(tt.jobs, tt.op)); !slices.Equal(got, tt.want) {
				t.Errorf("FailureStreak() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestOpJobsOrder(t *testing.T) {
	sameAttempt := jobs(
		mkJob(OpApply, 2, failed, named("b"), createdAt(at(1))),
		mkJob(OpApply, 2, failed, named("c"), createdAt(at(1))),
		mkJob(OpApply, 2, failed, named("a"), createdAt(at(2))),
		mkJob(OpApply, 3, failed, named("d"), createdAt(at(0))),
		mkJob(OpPlan, 9, failed, named("p")),
	)
	want := []string{"d", "a", "c", "b"}
	if got := names(OpJobs(sameAttempt, OpApply)); !slices.Equal(got, want) {
		t.Errorf("newest first is attempt, then creation, then name, descending: got %v, want %v", got, want)
	}
}

func TestRetryNumber(t *testing.T) {
	history := jobs(
		mkJob(OpApply, 1, failed),
		mkJob(OpApply, 2, succeeded),
		mkJob(OpApply, 3, failed),
		mkJob(OpApply, 4, blocked),
		mkJob(OpApply, 5, interrupted),
		mkJob(OpApply, 6, deadline),
		mkJob(OpApply, 7, succeeded),
		mkJob(OpRefresh, 1, failed),
	)
	tests := []struct {
		name string
		job  batchv1.Job
		want int
	}{
		{"the first run of an op is retry 1", history[0], 1},
		{"a run right after a success is retry 1", history[2], 1},
		{"a success after failures is 1 plus the counted failures since the last success", history[6], 3},
		{"blocked and interrupted runs add nothing to later retry numbers", history[5], 2},
		{"a blocked run has a retry number too", history[3], 2},
		{"only failures of the same op count", mkJob(OpRefresh, 2, running), 2},
		{"a Job not in the list is numbered among them", mkJob(OpApply, 8, running), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := RetryNumber(&tt.job, history); got != tt.want {
				t.Errorf("RetryNumber() = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestBackoffDelay(t *testing.T) {
	m := time.Minute
	tests := []struct {
		name   string
		limit  *int32
		delays []time.Duration // after 1, 2, 3, ... failures
	}{
		{"the default limit 3 gives 1m, 2m, then the 10m cap at once", nil, []time.Duration{1 * m, 2 * m, 10 * m, 10 * m}},
		{"limit 3 gives 1m, 2m, 10m, 10m", limit(3), []time.Duration{1 * m, 2 * m, 10 * m, 10 * m}},
		{"limit 5 gives 1m, 2m, 4m, 8m, 10m", limit(5), []time.Duration{1 * m, 2 * m, 4 * m, 8 * m, 10 * m, 10 * m}},
		{"limit 1 gives the 10m cap at once", limit(1), []time.Duration{10 * m, 10 * m}},
		{"limit 0 counts like 1", limit(0), []time.Duration{10 * m, 10 * m}},
		{"a negative limit counts like 1", limit(-2), []time.Duration{10 * m}},
		{"below a high limit the doubling still stops at 10m", limit(100), []time.Duration{1 * m, 2 * m, 4 * m, 8 * m, 10 * m, 10 * m}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			limits := Limits{FailedJobsHistoryLimit: tt.limit}
			for i, want := range tt.delays {
				if got := BackoffDelay(i+1, limits); got != want {
					t.Errorf("BackoffDelay(%d) = %v, want %v", i+1, got, want)
				}
			}
		})
	}
	t.Run("no failures, no delay", func(t *testing.T) {
		if got := BackoffDelay(0, Limits{}); got != 0 {
			t.Errorf("BackoffDelay(0) = %v", got)
		}
	})
	t.Run("a huge failure count does not overflow", func(t *testing.T) {
		if got := BackoffDelay(math.MaxInt, Limits{FailedJobsHistoryLimit: limit(100)}); got != BackoffCap {
			t.Errorf("BackoffDelay(MaxInt) = %v", got)
		}
		if got := BackoffDelay(99, Limits{FailedJobsHistoryLimit: limit(100)}); got != BackoffCap {
			t.Errorf("BackoffDelay(99) = %v", got)
		}
	})
}

func TestLimits(t *testing.T) {
	tests := []struct {
		name  string
		limit *int32
		want  int
	}{
		{"an unset limit is 3", nil, 3},
		{"limit 0 keeps 0", limit(0), 0},
		{"limit 5 keeps 5", limit(5), 5},
		{"a limit above 100 is 100", limit(1000), 100},
		{"a negative limit is 0", limit(-1), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := Limits{SuccessfulJobsHistoryLimit: tt.limit, FailedJobsHistoryLimit: tt.limit}
			if l.Successful() != tt.want || l.Failed() != tt.want {
				t.Errorf("Successful(), Failed() = %d, %d, want %d", l.Successful(), l.Failed(), tt.want)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	// Attempt n finishes at minute 10n+5.
	tests := []struct {
		name       string
		jobs       []batchv1.Job
		op         Op
		limit      *int32
		now        time.Time
		want       BackoffWindow
		wantActive bool
	}{
		{"no failure, no window", jobs(mkJob(OpApply, 1, succeeded)), OpApply, nil, at(16), BackoffWindow{}, false},
		{
			"one failure waits 1m from when it finished", jobs(mkJob(OpApply, 1, failed)), OpApply, nil, at(15),
			BackoffWindow{Failures: 1, Delay: time.Minute, RetryAfter: at(16)}, true,
		},
		{
			"the window ends at retryAfter", jobs(mkJob(OpApply, 1, failed)), OpApply, nil, at(16),
			BackoffWindow{Failures: 1, Delay: time.Minute, RetryAfter: at(16)}, false,
		},
		{
			"the window runs from the newest counted failure", jobs(mkJob(OpApply, 1, failed), mkJob(OpApply, 2, deadline)), OpApply, nil, at(26),
			BackoffWindow{Failures: 2, Delay: 2 * time.Minute, RetryAfter: at(27)}, true,
		},
		{
			"an interruption after a failure neither resets nor moves the window", jobs(mkJob(OpApply, 1, failed), mkJob(OpApply, 2, interrupted)), OpApply, nil, at(15),
			BackoffWindow{Failures: 1, Delay: time.Minute, RetryAfter: at(16)}, true,
		},
		{
			"reaching the failed limit waits the 10m cap", jobs(mkJob(OpDrift, 1, failed), mkJob(OpDrift, 2, failed), mkJob(OpDrift, 3, failed)), OpDrift, nil, at(40),
			BackoffWindow{Failures: 3, Delay: 10 * time.Minute, RetryAfter: at(45)}, true,
		},
		{
			"with limit 0 one failure waits the cap", jobs(mkJob(OpRestore, 1, failed)), OpRestore, limit(0), at(20),
			BackoffWindow{Failures: 1, Delay: 10 * time.Minute, RetryAfter: at(25)}, true,
		},
		{
			"a failure with no recorded finish counts from its start", jobs(mkJob(OpApply, 1, failed, finishedAt(time.Time{}))), OpApply, nil, at(10),
			BackoffWindow{Failures: 1, Delay: time.Minute, RetryAfter: at(11)}, true,
		},
		{"a success of the op resets the count", jobs(mkJob(OpApply, 1, failed), mkJob(OpApply, 2, succeeded)), OpApply, nil, at(21), BackoffWindow{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, active := Backoff(tt.jobs, tt.op, Limits{FailedJobsHistoryLimit: tt.limit}, tt.now)
			if got.Failures != tt.want.Failures || got.Delay != tt.want.Delay || !got.RetryAfter.Equal(tt.want.RetryAfter) {
				t.Errorf("Backoff() = %+v, want %+v", got, tt.want)
			}
			if active != tt.wantActive {
				t.Errorf("Backoff() active = %v, want %v", active, tt.wantActive)
			}
		})
	}
}

func TestRemediation(t *testing.T) {
	drift := at(100)
	after := func(minutes int) func(*batchv1.Job) {
		return finishedAt(drift.Add(time.Duration(minutes) * time.Minute))
	}
	before := finishedAt(drift.Add(-time.Minute))
	tests := []struct {
		name           string
		jobs           []batchv1.Job
		lastDriftCheck time.Time
		limit          *int32
		wantCount      int
		wantAllowed    bool
	}{
		{"no failed apply: remediation may start", nil, drift, nil, 0, true},
		{"failed applies after the last drift check count", jobs(mkJob(OpApply, 1, failed, after(1)), mkJob(OpApply, 2, deadline, after(2))), drift, nil, 2, true},
		{"at the failed limit remediation waits", jobs(mkJob(OpApply, 1, failed, after(1)), mkJob(OpApply, 2, failed, after(2)), mkJob(OpApply, 3, failed, after(3))), drift, nil, 3, false},
		{"a failure finishing in the same second as the last drift check does not count", jobs(mkJob(OpApply, 1, failed, finishedAt(drift))), drift, limit(1), 0, true},
		{"failures before the last drift check do not count", jobs(mkJob(OpApply, 1, failed, before), mkJob(OpApply, 2, failed, after(2))), drift, nil, 1, true},
		{"the count stops at an apply success", jobs(mkJob(OpApply, 1, failed, after(1)), mkJob(OpApply, 2, succeeded, after(2)), mkJob(OpApply, 3, failed, after(3))), drift, nil, 1, true},
		{"blocked and plan-changed applies do not count", jobs(mkJob(OpApply, 1, blocked, after(1)), mkJob(OpApply, 2, planChanged, after(2))), drift, limit(1), 0, true},
		{"an interrupted apply does not count", jobs(mkJob(OpApply, 1, interrupted, after(1))), drift, limit(1), 0, true},
		{"with limit 0 one failure is the cap, as with 1", jobs(mkJob(OpApply, 1, failed, after(1))), drift, limit(0), 1, false},
		{"with limit 5 four failures still allow one more", jobs(mkJob(OpApply, 1, failed, after(1)), mkJob(OpApply, 2, failed, after(2)), mkJob(OpApply, 3, failed, after(3)), mkJob(OpApply, 4, failed, after(4))), drift, limit(5), 4, true},
		{"with no successful drift check every failure counts", jobs(mkJob(OpApply, 1, failed, before)), time.Time{}, limit(1), 1, false},
		{"a failure without a recorded finish counts", jobs(mkJob(OpApply, 1, failed, finishedAt(time.Time{}))), drift, limit(1), 1, false},
		{"failures of other ops do not count", jobs(mkJob(OpDrift, 1, failed, after(1)), mkJob(OpPlan, 1, failed, after(1))), drift, limit(1), 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := RemediationFailures(tt.jobs, tt.lastDriftCheck); got != tt.wantCount {
				t.Errorf("RemediationFailures() = %d, want %d", got, tt.wantCount)
			}
			if got := RemediationAllowed(tt.jobs, tt.lastDriftCheck, Limits{FailedJobsHistoryLimit: tt.limit}); got != tt.wantAllowed {
				t.Errorf("RemediationAllowed() = %v, want %v", got, tt.wantAllowed)
			}
		})
	}
}

func TestActiveJob(t *testing.T) {
	tests := []struct {
		name string
		all  []batchv1.Job
		want string // "" for none
	}{
		{"no Jobs, no active Job", nil, ""},
		{"finished Jobs of every outcome are not active", jobs(
			mkJob(OpApply, 1, succeeded), mkJob(OpApply, 2, failed), mkJob(OpApply, 3, interrupted),
			mkJob(OpApply, 4, blocked), mkJob(OpPlan, 1, planUnreadable), mkJob(OpDrift, 1, deadline),
		), ""},
		{"a running Job is active", jobs(mkJob(OpApply, 1, succeeded), mkJob(OpDrift, 2, running)), "drift-a2"},
		{"a pending Job, not started yet, is active", jobs(mkJob(OpApply, 1, succeeded), mkJob(OpPlan, 2, pending)), "plan-a2"},
		{"of several unfinished Jobs the newest created is active, whatever the list order", jobs(
			mkJob(OpRefresh, 1, running, createdAt(at(30))), mkJob(OpApply, 5, running, createdAt(at(20))), mkJob(OpDrift, 1, running, createdAt(at(10))),
		), "refresh-a1"},
		{"a newer finished Job does not hide an older unfinished one", jobs(mkJob(OpApply, 1, running), mkJob(OpApply, 2, failed)), "apply-a1"},
		{"unfinished Jobs created in the same second go by attempt", jobs(
			mkJob(OpApply, 2, running, createdAt(at(1))), mkJob(OpApply, 3, running, createdAt(at(1))), mkJob(OpApply, 1, running, createdAt(at(1))),
		), "apply-a3"},
		{"unfinished Jobs created in the same second with the same attempt go by name", jobs(
			mkJob(OpDrift, 1, running, createdAt(at(1))), mkJob(OpRefresh, 1, running, createdAt(at(1))), mkJob(OpApply, 1, running, createdAt(at(1))),
		), "refresh-a1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, order := range [][]batchv1.Job{tt.all, reversed(tt.all)} {
				got := ""
				if j := ActiveJob(order); j != nil {
					got = j.Name
				}
				if got != tt.want {
					t.Errorf("ActiveJob(%v) = %q, want %q", jobNames(order), got, tt.want)
				}
			}
		})
	}
}

func TestNewestSuccess(t *testing.T) {
	tests := []struct {
		name         string
		all          []batchv1.Job
		op           Op
		wantJob      string // "" for none
		wantFinished time.Time
		wantOK       bool
	}{
		{"no Jobs, no success", nil, OpApply, "", time.Time{}, false},
		{"failures are no success", jobs(mkJob(OpApply, 1, failed), mkJob(OpApply, 2, planChanged)), OpApply, "", time.Time{}, false},
		{"a running Job is no success", jobs(mkJob(OpApply, 1, running)), OpApply, "", time.Time{}, false},
		{"the newest success of op, by attempt, and when it finished", jobs(
			mkJob(OpApply, 1, succeeded), mkJob(OpApply, 3, succeeded), mkJob(OpApply, 4, failed), mkJob(OpApply, 2, succeeded),
		), OpApply, "apply-a3", at(35), true},
		{"another op's success does not count", jobs(mkJob(OpDrift, 5, succeeded), mkJob(OpApply, 1, succeeded)), OpApply, "apply-a1", at(15), true},
		{"the finish comes from the Complete condition", jobs(mkJob(OpRefresh, 1, succeeded, finishedAt(at(99)))), OpRefresh, "refresh-a1", at(99), true},
		{"a newest success without a recorded finish is not ok, and no older one stands in", jobs(
			mkJob(OpDrift, 1, succeeded), mkJob(OpDrift, 2, succeeded, finishedAt(time.Time{})),
		), OpDrift, "drift-a2", time.Time{}, false},
		{"a plan that succeeded without a readable plan is no success", jobs(mkJob(OpPlan, 1, planUnreadable)), OpPlan, "", time.Time{}, false},
		{"an unknown op has no success", jobs(mkJob(OpApply, 1, succeeded)), Op("bogus"), "", time.Time{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			job, finished, ok := NewestSuccess(tt.all, tt.op)
			got := ""
			if job != nil {
				got = job.Name
			}
			if got != tt.wantJob || !finished.Equal(tt.wantFinished) || ok != tt.wantOK {
				t.Errorf("NewestSuccess(%s) = %q, %v, %v; want %q, %v, %v", tt.op, got, finished, ok, tt.wantJob, tt.wantFinished, tt.wantOK)
			}
		})
	}
}

// reversed returns a reversed copy of js.
func reversed(js []batchv1.Job) []batchv1.Job {
	out := slices.Clone(js)
	slices.Reverse(out)
	return out
}

// jobNames returns the names of the Jobs, in order.
func jobNames(js []batchv1.Job) []string {
	out := []string{}
	for i := range js {
		out = append(out, js[i].Name)
	}
	return out
}

package app

import (
	"time"

	"k8s.io/apimachinery/pkg/util/duration"

	runsv1alpha1 "github.com/captf/captf/apis/runs/v1alpha1"
)

// None is what a cell shows when there is nothing to show.
const None = "—"

// NextRetry says in words when a run's operation may be retried: "in 45s" while its backoff
// window is open, "now" once it has passed, and None when the run carries no window (it is not
// the operation's newest counted failure).
func NextRetry(b *runsv1alpha1.Backoff, now time.Time) string {
	if b == nil {
		return None
	}
	return Until(b.RetryAfter.Time, now)
}

// Until says "in 45s" for a time in the future, rounded up to the second, and "now" otherwise.
func Until(t, now time.Time) string {
	left := t.Sub(now)
	if left <= 0 {
		return "now"
	}
	return "in " + duration.HumanDuration(left.Truncate(time.Second)+roundUp(left))
}

// roundUp is the second a partial second rounds up to.
func roundUp(d time.Duration) time.Duration {
	if d%time.Second == 0 {
		return 0
	}
	return time.Second
}

// Age says how long ago t was, like kubectl's AGE column.
func Age(t, now time.Time) string {
	if t.IsZero() {
		return None
	}
	return duration.HumanDuration(now.Sub(t))
}

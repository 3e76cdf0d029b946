package app

import (
	"time"

	"k8s.io/apimachinery/pkg/util/duration"
)

// None is what a cell shows when there is nothing to show, as in kubectl's tables.
const None = "<none>"

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

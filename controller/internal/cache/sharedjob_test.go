package cache

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/jobstest"
)

// TestASharedCachedJobReadsAsItsCopy: the scrape reads the cached Jobs without copying them, and
// must read the same Job the reconcilers' copies are.
func TestASharedCachedJobReadsAsItsCopy(t *testing.T) {
	created := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	for _, outcome := range []jobs.Outcome{jobs.OutcomeRunning, jobs.OutcomeSucceeded, jobs.OutcomeFailed, jobs.OutcomeInterrupted} {
		t.Run(string(outcome), func(t *testing.T) {
			job := jobstest.Builder{Kind: jobs.KindCluster, Name: "web", Op: jobs.OpApply, Attempt: 1, Outcome: outcome, Created: created}.Job()
			cached := CachedJobOf(&job)
			if shared, copied := cached.shared(), cached.Job(); !equality.Semantic.DeepEqual(shared, copied) {
				t.Fatalf("shared %+v, copy %+v", shared, copied)
			}
		})
	}
}

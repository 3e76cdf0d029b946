package controller

import (
	"github.com/captf/captf/controller/metrics"
	"github.com/captf/captf/jobs"
)

// activeJobs counts the unfinished managed Jobs by owner kind and op from the Job cache, for the
// captf_jobs_active gauge. It only reads, so it takes the cached Jobs as they are.
func activeJobs(c *JobCache) func() map[[2]string]int {
	return func() map[[2]string]int {
		counts := map[[2]string]int{}
		c.each(func(j *CachedJob) {
			if !j.finished() {
				op := jobs.Op(j.Labels[jobs.LabelOp])
				if !op.Valid() {
					op = "" // as jobs.OpOf reads it
				}
				// Anyone may label a Job managed: only captf's kinds and ops become label
				// values, so the map and the gauge stay within the fixed sets.
				counts[[2]string{metrics.KindLabel(jobs.Kind(j.Labels[jobs.LabelOwnerKind])), metrics.OpLabel(op)}]++
			}
		})
		return counts
	}
}

package controller

import (
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
				// Few Jobs run at once: the Job a run-model function takes is built only for them.
				op := jobs.OpOf(&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Labels: j.Labels}})
				// Anyone may label a Job managed: only captf's kinds and ops become label
				// values, so the map and the gauge stay within the fixed sets.
				counts[[2]string{metrics.KindLabel(jobs.Kind(j.Labels[jobs.LabelOwnerKind])), metrics.OpLabel(op)}]++
			}
		})
		return counts
	}
}

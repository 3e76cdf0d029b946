package metrics

import (
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/captf/captf/controller/internal/cache"
	"github.com/captf/captf/jobs"
)

// ActiveJobs counts the unfinished managed Jobs by owner kind and op from the Job cache, for the
// captf_jobs_active gauge. It only reads, so it takes the cached Jobs as they are.
func ActiveJobs(c *cache.JobCache) func() map[[2]string]int {
	return func() map[[2]string]int {
		counts := map[[2]string]int{}
		c.Each(func(j *cache.CachedJob) {
			if !j.Finished() {
				// Few Jobs run at once: the Job a run-model function takes is built only for them.
				op := jobs.OpOf(&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Labels: j.Labels}})
				// Anyone may label a Job managed: only captf's kinds and ops become label
				// values, so the map and the gauge stay within the fixed sets.
				counts[[2]string{KindLabel(jobs.Kind(j.Labels[jobs.LabelOwnerKind])), OpLabel(op)}]++
			}
		})
		return counts
	}
}

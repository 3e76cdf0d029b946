package controller

import (
	"context"

	batchv1 "k8s.io/api/batch/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/captf/captf/controller/metrics"
	"github.com/captf/captf/jobs"
)

// activeJobs counts the unfinished managed Jobs by owner kind and op from the manager's cache,
// for the captf_jobs_active gauge. It only reads, so it takes the cached Jobs without copying them.
func activeJobs(mgr ctrl.Manager) func() map[[2]string]int {
	return func() map[[2]string]int {
		var list batchv1.JobList
		if err := mgr.GetCache().List(context.Background(), &list, client.MatchingLabels{jobs.LabelManaged: jobs.ManagedValue}, client.UnsafeDisableDeepCopy); err != nil {
			return nil
		}
		counts := map[[2]string]int{}
		for i := range list.Items {
			j := &list.Items[i]
			if !jobs.OutcomeOf(j).Finished() {
				// Anyone may label a Job managed: only captf's kinds and ops become label
				// values, so the map and the gauge stay within the fixed sets.
				counts[[2]string{metrics.KindLabel(jobs.Kind(j.Labels[jobs.LabelOwnerKind])), metrics.OpLabel(jobs.OpOf(j))}]++
			}
		}
		return counts
	}
}

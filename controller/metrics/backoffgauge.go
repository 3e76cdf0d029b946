package metrics

import (
	"context"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/jobs"
)

// RunsReader appends to buf the cached Jobs labelled as runs of the named object, for reads
// only (cache.JobCache.AppendOwnerJobs).
type RunsReader func(buf []batchv1.Job, namespace string, kind jobs.Kind, name string) ([]batchv1.Job, error)

// RunsFilter keeps, of the Jobs labelled as runs of obj, those that are its runs
// (workspace.OwnRuns under the run key).
type RunsFilter func(labelled []batchv1.Job, obj client.Object) []batchv1.Job

// BackoffWindowsOpen counts, by kind and op, the objects of every kind whose op is inside its
// backoff window, from the objects in the manager's cache and their runs in the Job cache, for
// the captf_backoff_windows_open gauge; own tells the runs from forgeries as the reconcilers do.
// It returns nil when either cache cannot tell.
func BackoffWindowsOpen(objects client.Reader, runs RunsReader, own RunsFilter, clk clock.PassiveClock) func() map[[2]string]int {
	return func() map[[2]string]int {
		now := clk.Now()
		open := map[[2]string]int{}
		var buf []batchv1.Job
		for _, kind := range infrav1.Kinds {
			list := kind.NewList()
			if err := objects.List(context.Background(), list); err != nil {
				return nil
			}
			err := meta.EachListItem(list, func(obj runtime.Object) error {
				ws, ok := obj.(infrav1.Workspace)
				if !ok {
					return nil
				}
				var err error
				if buf, err = runs(buf[:0], ws.GetNamespace(), jobs.Kind(kind.Kind), ws.GetName()); err != nil {
					return err
				}
				for _, op := range backoffsOpen(own(buf, ws), jobs.LimitsOf(ws.WorkspaceSpec().Jobs), now) {
					open[[2]string{kind.Kind, string(op)}]++
				}
				return nil
			})
			if err != nil {
				return nil
			}
		}
		return open
	}
}

// backoffsOpen returns the ops of an object whose backoff window now is inside (jobs.Backoff),
// from its own runs and its history limits.
func backoffsOpen(own []batchv1.Job, limits jobs.Limits, now time.Time) []jobs.Op {
	var open []jobs.Op
	for _, op := range jobs.Ops() {
		if _, inside := jobs.Backoff(own, op, limits, now); inside {
			open = append(open, op)
		}
	}
	return open
}

package metrics

import (
	"errors"
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/jobstest"
)

// TestBackoffsOpen: an op's window is open while jobs.Backoff says now is inside it, under the
// object's own history limits.
func TestBackoffsOpen(t *testing.T) {
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	// run is a Job of op with outcome that finished ago before now.
	run := func(op jobs.Op, attempt int32, outcome jobs.Outcome, ago time.Duration) batchv1.Job {
		return jobstest.Builder{Kind: jobs.KindCluster, Name: "web", Op: op, Attempt: attempt, Outcome: outcome, Created: now.Add(-ago - jobstest.RunTime)}.Job()
	}
	tests := []struct {
		name   string
		jobs   []batchv1.Job
		limits jobs.Limits
		want   []jobs.Op
	}{
		{name: "no Jobs, no window"},
		{name: "a success opens none", jobs: []batchv1.Job{run(jobs.OpApply, 1, jobs.OutcomeSucceeded, 10*time.Second)}},
		{name: "a failure opens its op's window for a minute", jobs: []batchv1.Job{run(jobs.OpApply, 1, jobs.OutcomeFailed, 30*time.Second)},
			want: []jobs.Op{jobs.OpApply}},
		{name: "the window closes when its delay has passed", jobs: []batchv1.Job{run(jobs.OpApply, 1, jobs.OutcomeFailed, 61*time.Second)}},
		{name: "a deadline kill opens it too", jobs: []batchv1.Job{run(jobs.OpDrift, 1, jobs.OutcomeDeadlineExceeded, 30*time.Second)},
			want: []jobs.Op{jobs.OpDrift}},
		{name: "an interruption from outside is free", jobs: []batchv1.Job{run(jobs.OpApply, 1, jobs.OutcomeInterrupted, 10*time.Second)}},
		{name: "a later success closes it", jobs: []batchv1.Job{
			run(jobs.OpApply, 1, jobs.OutcomeFailed, 40*time.Second), run(jobs.OpApply, 2, jobs.OutcomeSucceeded, 10*time.Second)}},
		{name: "two failures double the delay", jobs: []batchv1.Job{
			run(jobs.OpApply, 1, jobs.OutcomeFailed, 5*time.Minute), run(jobs.OpApply, 2, jobs.OutcomeFailed, 90*time.Second)},
			want: []jobs.Op{jobs.OpApply}},
		{name: "a failed limit of 1 gives the cap at the first failure", limits: jobs.Limits{FailedJobsHistoryLimit: ptr.To[int32](1)},
			jobs: []batchv1.Job{run(jobs.OpApply, 1, jobs.OutcomeFailed, 5*time.Minute)}, want: []jobs.Op{jobs.OpApply}},
		{name: "each op has its own window", jobs: []batchv1.Job{
			run(jobs.OpApply, 1, jobs.OutcomeFailed, 10*time.Second), run(jobs.OpDrift, 1, jobs.OutcomeFailed, 20*time.Second),
			run(jobs.OpRefresh, 1, jobs.OutcomeSucceeded, 5*time.Second)},
			want: []jobs.Op{jobs.OpApply, jobs.OpDrift}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := backoffsOpen(tt.jobs, tt.limits, now); !slices.Equal(got, tt.want) {
				t.Fatalf("open = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestBackoffWindowsOpenFromTheCaches: the gauge counts the objects in the manager's cache by
// kind and op, from their own runs in the Job cache; anything that fails to read tells nothing.
func TestBackoffWindowsOpenFromTheCaches(t *testing.T) {
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	cluster := func(name, uid string) infrav1.TerraformCluster {
		return infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(uid)}}
	}
	failed := func(owner infrav1.TerraformCluster, op jobs.Op) batchv1.Job {
		j := jobstest.Builder{Kind: jobs.KindCluster, Name: owner.Name, Namespace: "ns", Op: op, Attempt: 1, Outcome: jobs.OutcomeFailed,
			Created: now.Add(-jobstest.RunTime - 10*time.Second)}.Job()
		j.OwnerReferences = []metav1.OwnerReference{{APIVersion: "infrastructure.cluster.x-k8s.io/v1alpha1", Kind: "TerraformCluster",
			Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}}
		return j
	}
	a, b, c := cluster("a", "uid-a"), cluster("b", "uid-b"), cluster("c", "uid-c")
	forged := failed(c, jobs.OpApply)
	forged.OwnerReferences[0].UID = "someone-else"
	tests := []struct {
		name     string
		clusters []infrav1.TerraformCluster
		runs     map[string][]batchv1.Job
		runsErr  error
		listErr  error
		want     map[[2]string]int
	}{
		{name: "objects without failures count nothing", clusters: []infrav1.TerraformCluster{a}, want: map[[2]string]int{}},
		{
			name:     "each object inside an op's window counts once for its kind and op",
			clusters: []infrav1.TerraformCluster{a, b},
			runs:     map[string][]batchv1.Job{"a": {failed(a, jobs.OpApply), failed(a, jobs.OpDrift)}, "b": {failed(b, jobs.OpApply)}},
			want:     map[[2]string]int{{"TerraformCluster", "apply"}: 2, {"TerraformCluster", "drift"}: 1},
		},
		{
			name:     "only the runs the filter keeps count",
			clusters: []infrav1.TerraformCluster{c},
			runs:     map[string][]batchv1.Job{"c": {forged}},
			want:     map[[2]string]int{},
		},
		{name: "a Job cache that has not synced tells nothing", clusters: []infrav1.TerraformCluster{a}, runsErr: errors.New("the Job cache has not synced")},
		{name: "an object cache that fails tells nothing", listErr: errors.New("cache not synced")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cache := &clusterLister{clusters: tt.clusters, err: tt.listErr}
			runs := func(buf []batchv1.Job, namespace string, kind jobs.Kind, name string) ([]batchv1.Job, error) {
				if tt.runsErr != nil {
					return buf, tt.runsErr
				}
				if namespace == "ns" && kind == jobs.KindCluster {
					buf = append(buf, tt.runs[name]...)
				}
				return buf, nil
			}
			// The reconcilers' filter is workspace.OwnRuns; this one keeps the Jobs obj controls.
			own := func(labelled []batchv1.Job, obj client.Object) []batchv1.Job {
				var kept []batchv1.Job
				for _, j := range labelled {
					if ref := metav1.GetControllerOf(&j); ref != nil && ref.UID == obj.GetUID() {
						kept = append(kept, j)
					}
				}
				return kept
			}
			got := BackoffWindowsOpen(cache, runs, own, clocktesting.NewFakePassiveClock(now))()
			if (got == nil) != (tt.want == nil) || len(got) != len(tt.want) {
				t.Fatalf("open = %v, want %v", got, tt.want)
			}
			for key, n := range tt.want {
				if got[key] != n {
					t.Errorf("open %v = %d, want %d", key, got[key], n)
				}
			}
		})
	}
}

package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/captf/captf/jobs"
)

// jobsPerObject is the retained history of one synthetic object: with the default limits of 3,
// an object keeps up to 3 successes and 3 failures per op; 10 is a busy object.
const jobsPerObject = 10

// syntheticJobs returns n retained Jobs of n/jobsPerObject TerraformClusters spread over 10
// namespaces: applies with successes and failures, drift checks and refreshes, each with a pod
// template and a result summary as the controller writes them.
func syntheticJobs(n int) []*batchv1.Job {
	var out []*batchv1.Job
	errText := strings.Repeat("Error: creating resource: the provider said no. ", 6)
	for o := 0; len(out) < n; o++ {
		ns, owner := fmt.Sprintf("team-%d", o%10), fmt.Sprintf("cluster-%05d", o)
		history := []struct {
			op      jobs.Op
			attempt int32
			opt     jobOpt
		}{
			{jobs.OpApply, 1, succeeded(t0.Add(-5 * time.Hour))},
			{jobs.OpApply, 2, failed(t0.Add(-4 * time.Hour))},
			{jobs.OpApply, 3, failed(t0.Add(-3 * time.Hour))},
			{jobs.OpApply, 4, succeeded(t0.Add(-2 * time.Hour))},
			{jobs.OpDrift, 1, succeeded(t0.Add(-90 * time.Minute))},
			{jobs.OpDrift, 2, succeeded(t0.Add(-60 * time.Minute))},
			{jobs.OpDrift, 3, failed(t0.Add(-30 * time.Minute))},
			{jobs.OpRefresh, 1, succeeded(t0.Add(-50 * time.Minute))},
			{jobs.OpRefresh, 2, succeeded(t0.Add(-20 * time.Minute))},
			{jobs.OpRefresh, 3, started(t0.Add(-time.Minute))},
		}
		for _, h := range history[:min(jobsPerObject, n-len(out))] {
			job := newJob(ns, owner, h.op, h.attempt, h.opt)
			job.UID = uuid.NewUUID() // as the API server makes them
			if jobs.OutcomeOf(job).Finished() {
				s := jobs.Summary{Outcome: jobs.OutcomeSucceeded, Changes: &jobs.Changes{Add: 1, Change: 2}}
				if jobs.OutcomeOf(job) == jobs.OutcomeFailed {
					s = jobs.Summary{Outcome: jobs.OutcomeFailed, Error: &jobs.ErrorSummary{Kind: jobs.ErrorKindStep, Step: "apply", Summary: errText}}
				}
				withResult(s)(job)
			}
			out = append(out, job)
		}
	}
	return out
}

// benchSource is a synced Source over n synthetic Jobs.
func benchSource(b *testing.B, n int) *Source {
	b.Helper()
	all := syntheticJobs(n)
	src := newTestSource(b)
	for _, j := range all {
		if err := src.add(j); err != nil {
			b.Fatal(err)
		}
	}
	return src
}

// BenchmarkListRuns lists every run as kubectl get runs -A does: compute the whole list, convert
// it to a Table, put each row's metadata in place of its object as the API server does for
// kubectl (includeObject=Metadata), and encode the Table. jobs=100000 is the largest size of
// the goals; its Source takes a while to build.
func BenchmarkListRuns(b *testing.B) {
	for _, n := range []int{3000, 30000, 100000} {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			src := benchSource(b, n)
			storage := NewRunREST(src)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				obj, err := storage.List(context.Background(), &metainternalversion.ListOptions{})
				if err != nil {
					b.Fatal(err)
				}
				table, err := storage.ConvertToTable(context.Background(), obj, nil)
				if err != nil {
					b.Fatal(err)
				}
				for i := range table.Rows {
					m, err := meta.Accessor(table.Rows[i].Object.Object)
					if err != nil {
						b.Fatal(err)
					}
					partial := meta.AsPartialObjectMetadata(m)
					partial.SetGroupVersionKind(metav1.SchemeGroupVersion.WithKind("PartialObjectMetadata"))
					table.Rows[i].Object.Object = partial
				}
				if _, err := json.Marshal(table); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkListRunsLabelSelected lists the runs of one object by label among 30,000 Jobs.
func BenchmarkListRunsLabelSelected(b *testing.B) {
	src := benchSource(b, 30000)
	storage := NewRunREST(src)
	sel := labels.SelectorFromSet(labels.Set{jobs.LabelOwnerName: "cluster-01234"})
	b.ResetTimer()
	for b.Loop() {
		obj, err := storage.List(context.Background(), &metainternalversion.ListOptions{LabelSelector: sel})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := storage.ConvertToTable(context.Background(), obj, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWatchDelay measures the time from a Job event reaching the Source to the watcher
// receiving the run's event, with 30,000 Jobs retained.
func BenchmarkWatchDelay(b *testing.B) {
	src := benchSource(b, 30000)
	w, err := NewRunREST(src).Watch(context.Background(), &metainternalversion.ListOptions{ResourceVersion: src.listRV()})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	job := newJob("team-3", "cluster-00003", jobs.OpPlan, 1)
	feed := &jobFeed{src: src}
	b.ResetTimer()
	for b.Loop() {
		job.ResourceVersion = nextRV()
		if err := feed.Add(job); err != nil {
			b.Fatal(err)
		}
		if ev := <-w.ResultChan(); ev.Type != watch.Added {
			b.Fatalf("event %s", ev.Type)
		}
		if err := feed.Delete(job); err != nil {
			b.Fatal(err)
		}
		<-w.ResultChan()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(2*b.N), "µs/event")
}

// BenchmarkMemoryPerJob reports the heap the Job store holds per retained Job: the compact
// records, with the store's keys and owner lists.
func BenchmarkMemoryPerJob(b *testing.B) {
	const n = 30000
	all := syntheticJobs(n)
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		store := newJobStore()
		for _, j := range all {
			store.put(recordOfJob(j.DeepCopy()))
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/job")
		runtime.KeepAlive(store)
	}
}

package aggregated

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"

	"github.com/captf/captf/jobs"
)

// benchJobs is the number of retained Jobs the benchmarks create: CAPTF_BENCH_JOBS, default
// 1000 (10 per TerraformCluster), a reduced size of the 30,000 of the goals that
// creates in seconds.
func benchJobs() int {
	if n, err := strconv.Atoi(os.Getenv("CAPTF_BENCH_JOBS")); err == nil && n > 0 {
		return n
	}
	return 1000
}

// benchNamespaces is how many namespaces the retained Jobs are spread over.
const benchNamespaces = 10

var (
	benchOnce sync.Once
	benchNS   []string
	benchErr  error
	// rssPerJob is the growth of the server process's resident memory per retained Job.
	rssPerJob float64
	// kubeRSSPerJob is the same for kube-apiserver, which stores the Jobs.
	kubeRSSPerJob float64
	// listSteadyRSS is the server process's resident memory once it holds the Jobs, and
	// listPeakRSS its peak while it answers one whole kubectl get runs -A, in bytes.
	listSteadyRSS, listPeakRSS int
)

var runsGVR = schema.GroupVersionResource{Group: "runs.captf.io", Version: "v1alpha1", Resource: "runs"}

// setUpBench creates benchJobs Jobs with finished statuses and result summaries, 10 per
// TerraformCluster, the clusters spread round-robin over benchNamespaces namespaces, measures the
// memory the Jobs cost the servers and the server's peak during one whole list, and waits until
// the server lists them all. It returns the namespace of cluster-00007, which the
// label-selected benchmark lists.
func setUpBench(b *testing.B) string {
	b.Helper()
	benchOnce.Do(func() {
		// Unthrottled: at 100,000 Jobs the client's rate limit, not the servers, would set
		// how long the setup takes.
		c := newUnthrottledClients(b)
		for range benchNamespaces {
			benchNS = append(benchNS, c.newNamespace(b))
		}
		n := benchJobs()
		rssBefore := procMemory(serverPID, "VmRSS")
		if rssBefore == 0 {
			benchErr = fmt.Errorf("cannot read the resident memory of the server process %d", serverPID)
			return
		}
		kubePID, err := childProcess("kube-apiserver")
		if err != nil {
			benchErr = err
			return
		}
		kubeRSSBefore := procMemory(kubePID, "VmRSS")

		owners := make(chan int)
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for o := range owners {
					web := c.createCluster(b, benchNS[o%benchNamespaces], fmt.Sprintf("cluster-%05d", o), nil)
					for a := int32(1); a <= 10 && int(o)*10+int(a) <= n; a++ {
						op := []jobs.Op{jobs.OpApply, jobs.OpDrift}[a%2]
						state, s := jobSucceeded, jobs.Summary{Changes: &jobs.Changes{Add: 1}}
						if a%3 == 0 {
							state, s = jobFailed, jobs.Summary{Error: &jobs.ErrorSummary{Kind: jobs.ErrorKindStep, Step: "apply", Summary: "quota exceeded"}}
						}
						// Three requests a Job: the result annotations go in with the create, the
						// signature (with the result's digest) once the Job has its UID, as the
						// controller signs it, and the status is written from the signed object.
						job := c.createJob(b, web, op, a, resultAnnotations(b, s))
						c.writeStatus(b, job, state, time.Now().Add(-time.Duration(10-a)*time.Minute))
					}
				}
			}()
		}
		for o := 0; o*10 < n; o++ {
			owners <- o
		}
		close(owners)
		wg.Wait()
		// What holding the Jobs costs the server: its RSS once it has seen the last change. Its
		// one watch of Jobs is in resourceVersion order, so once it shows a change made after
		// all others it has taken them all in. Measured before any large list adds garbage.
		if err := waitForLastChange(b, c, benchNS[0]); err != nil {
			benchErr = err
			return
		}
		rssPerJob = float64(procMemory(serverPID, "VmRSS")-rssBefore) / float64(n)
		kubeRSSPerJob = float64(procMemory(kubePID, "VmRSS")-kubeRSSBefore) / float64(n)
		// What one whole list costs the server at its peak, measured before any other large
		// list has grown it.
		listSteadyRSS = procMemory(serverPID, "VmRSS")
		peakRSS := measurePeakRSS(serverPID, listSteadyRSS)
		out, err := kubectl(b, "get", "runs", "-A", "--no-headers")
		listPeakRSS = peakRSS()
		if err != nil {
			benchErr = fmt.Errorf("kubectl get runs -A: %w\n%s", err, out)
			return
		}
		dyn := dynamic.NewForConfigOrDie(getEnv(b).Config)
		deadline := time.Now().Add(2 * time.Minute)
		for {
			listed, err := 0, error(nil)
			for _, ns := range benchNS {
				list, lerr := dyn.Resource(runsGVR).Namespace(ns).List(context.Background(), metav1.ListOptions{})
				if lerr != nil {
					err = lerr
					break
				}
				listed += len(list.Items)
			}
			if err == nil && listed == n {
				break
			}
			if time.Now().After(deadline) {
				benchErr = fmt.Errorf("the server listed %d of %d runs", listed, n)
				if err != nil {
					benchErr = fmt.Errorf("%w: %w", benchErr, err)
				}
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchNS[7%benchNamespaces]
}

// BenchmarkAggregatedList compares kubectl get runs -A (through the aggregator and the
// server) with kubectl get jobs -A (kube-apiserver alone) over the same retained Jobs, both
// with kubectl's default chunk size: kube-apiserver answers jobs in chunks, the server answers
// runs whole. The kubectl-get-runs figures include the server's peak memory during one whole
// list (measured in setUpBench): its growth above the steady memory, and peak over steady.
func BenchmarkAggregatedList(b *testing.B) {
	getEnv(b)
	setUpBench(b)
	perOp := map[string]time.Duration{}
	for _, resource := range []string{"jobs", "runs"} {
		b.Run("kubectl-get-"+resource, func(b *testing.B) {
			for b.Loop() {
				mustKubectl(b, "get", resource, "-A", "--no-headers")
			}
			perOp[resource] = b.Elapsed() / time.Duration(b.N)
			b.ReportMetric(rssPerJob, "apiserver-RSS-B/job")
			b.ReportMetric(kubeRSSPerJob, "kube-apiserver-RSS-B/job")
			if resource == "runs" {
				b.ReportMetric(float64(max(listPeakRSS-listSteadyRSS, 0))/(1<<20), "list-peak-growth-MB")
				b.ReportMetric(float64(listPeakRSS)/float64(listSteadyRSS), "list-peak/steady")
			}
		})
	}
	// The floor: kubectl reading the same Table answers from a server that only replays them.
	b.Run("kubectl-get-runs-floor", func(b *testing.B) {
		kubectlFloor(b, "get", "runs", "-A", "--no-headers")
		floor := b.Elapsed() / time.Duration(b.N)
		if perOp["runs"] > 0 && perOp["jobs"] > 0 {
			b.ReportMetric(float64(perOp["runs"])/float64(perOp["jobs"]), "runs/jobs")
			b.ReportMetric(float64(perOp["runs"])/float64(floor), "runs/floor")
		}
	})
	// The same lists as one whole Table request each, without kubectl: what the servers spend.
	kube := newClients(b).kube.BatchV1().RESTClient()
	for resource, path := range map[string]string{"jobs": "/apis/batch/v1/jobs", "runs": "/apis/runs.captf.io/v1alpha1/runs"} {
		b.Run("table-"+resource, func(b *testing.B) {
			for b.Loop() {
				if _, err := kube.Get().AbsPath(path).SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAggregatedLabelSelectedList lists the runs of one object by label through the
// aggregator, and reports the median.
func BenchmarkAggregatedLabelSelectedList(b *testing.B) {
	ns := setUpBench(b)
	dyn := dynamic.NewForConfigOrDie(getEnv(b).Config)
	selector := jobs.LabelOwnerName + "=cluster-00007"
	var took []time.Duration
	for b.Loop() {
		start := time.Now()
		list, err := dyn.Resource(runsGVR).Namespace(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		took = append(took, time.Since(start))
		if err != nil || len(list.Items) == 0 {
			b.Fatalf("list: %v", err)
		}
	}
	b.ReportMetric(p50(took), "p50-ms")
}

// BenchmarkAggregatedWatchDelay measures the time from a Job update to its run's MODIFIED
// event on a watch through the aggregator, and reports the median.
func BenchmarkAggregatedWatchDelay(b *testing.B) {
	ns := setUpBench(b)
	c := newClients(b)
	dyn := dynamic.NewForConfigOrDie(getEnv(b).Config)
	list, err := dyn.Resource(runsGVR).Namespace(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	target := list.Items[0].GetName()
	w, err := dyn.Resource(runsGVR).Namespace(ns).Watch(context.Background(), metav1.ListOptions{ResourceVersion: list.GetResourceVersion(), FieldSelector: "metadata.name=" + target})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	var took []time.Duration
	i := 0
	for b.Loop() {
		i++
		start := time.Now()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			job, err := c.kube.BatchV1().Jobs(ns).Get(context.Background(), target, metav1.GetOptions{})
			if err != nil {
				return err
			}
			// A new result summary changes the run's status.
			job.Annotations[jobs.AnnotationResult] = fmt.Sprintf(`{"changes":{"add":%d,"change":0,"destroy":0}}`, 1000+i)
			_, err = c.kube.BatchV1().Jobs(ns).Update(context.Background(), job, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		select {
		case <-w.ResultChan():
			took = append(took, time.Since(start))
		case <-time.After(10 * time.Second):
			b.Fatal("no watch event within 10s")
		}
	}
	b.ReportMetric(p50(took), "p50-ms")
}

// waitForLastChange changes one Job of namespace and waits until the server shows its run at
// the Job's new resourceVersion.
func waitForLastChange(tb testing.TB, c clients, namespace string) error {
	ctx := context.Background()
	list, err := c.kube.BatchV1().Jobs(namespace).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return fmt.Errorf("no Job in %s to change: %w", namespace, err)
	}
	if len(list.Items) == 0 {
		return fmt.Errorf("no Job in %s to change", namespace)
	}
	job := &list.Items[0]
	if job.Annotations == nil {
		job.Annotations = map[string]string{}
	}
	job.Annotations["bench.captf.io/last-change"] = "true"
	if job, err = c.kube.BatchV1().Jobs(namespace).Update(ctx, job, metav1.UpdateOptions{}); err != nil {
		return err
	}
	dyn := dynamic.NewForConfigOrDie(getEnv(tb).Config)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		run, err := dyn.Resource(runsGVR).Namespace(namespace).Get(ctx, job.Name, metav1.GetOptions{})
		if err == nil && run.GetResourceVersion() == job.ResourceVersion {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("the server does not show the last change of Job %s: %w", job.Name, err)
			}
			return fmt.Errorf("the server does not show the last change of Job %s: it shows resourceVersion %s, not %s", job.Name, run.GetResourceVersion(), job.ResourceVersion)
		}
		time.Sleep(100 * time.Millisecond) // polling with a deadline
	}
}

func p50(d []time.Duration) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[len(s)/2].Microseconds()) / 1000
}

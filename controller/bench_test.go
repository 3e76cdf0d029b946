package controller_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller"
	"github.com/captf/captf/controller/contract"
	"github.com/captf/captf/controller/inputs"
	captfcache "github.com/captf/captf/controller/internal/cache"
	"github.com/captf/captf/controller/jobspec"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/runkey"
	"github.com/captf/captf/test/capitest"
	"github.com/captf/captf/test/testenv"
)

// requestCounter counts the manager's requests to the API server by kind of request.
type requestCounter struct {
	reads, writes, watches atomic.Int64
	mu                     sync.Mutex
	byResource             map[string]int
}

// resource names the kind of object a request is for, e.g. "GET secrets".
func resource(req *http.Request) string {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(parts) > 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) > 3 && parts[0] == "apis":
		parts = parts[3:]
	}
	if len(parts) > 2 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	res := parts[0]
	if len(parts) > 2 {
		res += "/" + parts[2]
	}
	return req.Method + " " + res
}

func (c *requestCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.byResource {
		out[k] = v
	}
	return out
}

func (c *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		switch {
		case req.Method == http.MethodGet && req.URL.Query().Get("watch") == "true":
			c.watches.Add(1)
		case req.Method == http.MethodGet:
			c.reads.Add(1)
		default:
			c.writes.Add(1)
		}
		c.mu.Lock()
		if c.byResource == nil {
			c.byResource = map[string]int{}
		}
		c.byResource[resource(req)]++
		c.mu.Unlock()
		return rt.RoundTrip(req)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// jobWatch records when a Job of each owner name was first seen.
type jobWatch struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

func (w *jobWatch) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.seen)
}

func (w *jobWatch) at(owner string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.seen[owner]
	return t, ok
}

func (w *jobWatch) reset() {
	w.mu.Lock()
	w.seen = map[string]time.Time{}
	w.mu.Unlock()
}

func watchJobs(ctx context.Context, b *testing.B, cfg *rest.Config, ns string) *jobWatch {
	cs := kubernetes.NewForConfigOrDie(cfg)
	w := &jobWatch{seen: map[string]time.Time{}}
	// From now on: the retained Jobs already there are not new ones.
	now, err := cs.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		b.Fatal(err)
	}
	watcher, err := cs.BatchV1().Jobs(ns).Watch(ctx, metav1.ListOptions{LabelSelector: jobs.ManagedSelector, ResourceVersion: now.ResourceVersion})
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		for ev := range watcher.ResultChan() {
			if job, ok := ev.Object.(*batchv1.Job); ok {
				w.mu.Lock()
				if _, dup := w.seen[job.Labels[jobs.LabelOwnerName]]; !dup {
					w.seen[job.Labels[jobs.LabelOwnerName]] = time.Now()
				}
				w.mu.Unlock()
			}
		}
	}()
	return w
}

func benchObjects() int {
	if n, err := strconv.Atoi(os.Getenv("CAPTF_BENCH_OBJECTS")); err == nil && n > 0 {
		return n
	}
	return 1000
}

// parallel runs fn for 0..n-1 on 16 workers.
func parallel(n int, fn func(i int) error) error {
	var wg sync.WaitGroup
	var first atomic.Value
	next := atomic.Int64{}
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					first.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	wg.Wait()
	if err, ok := first.Load().(error); ok {
		return err
	}
	return nil
}

// heapFigures are the heap's sizes after a collection: inUse counts the spans that hold live
// objects, free room in them included (runtime.MemStats.HeapInuse); live counts the live objects
// alone (HeapAlloc).
type heapFigures struct{ inUse, live int64 }

// heapInUse returns the heap's sizes after a collection. With CAPTF_BENCH_HEAPPROFILE set to a
// directory it also writes the heap profile there as <at>.pprof, to see what the figures hold.
func heapInUse(b *testing.B, at string) heapFigures {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	if dir := os.Getenv("CAPTF_BENCH_HEAPPROFILE"); dir != "" {
		f, err := os.Create(filepath.Join(dir, at+".pprof"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.WriteHeapProfile(f); err != nil {
			b.Fatal(err)
		}
	}
	return heapFigures{inUse: int64(m.HeapInuse), live: int64(m.HeapAlloc)}
}

// BenchmarkController measures the manager on the real API server with many converged objects,
// each with a history of retainedPerObject finished Jobs: the API traffic of a pass over all of
// them, the latency from one spec change to its Job, the time to start a Job for every object at
// once against a plain client doing the same writes, and the heap held per object, per retained
// Job and per started run.
func BenchmarkController(b *testing.B) {
	if os.Getenv("CAPTF_BENCH_HEAPPROFILE") != "" {
		runtime.MemProfileRate = 1 // every allocation, so that the profiles add up to the figures
	}
	env := testenv.Get(b)
	ctrl.SetLogger(logr.Discard())
	n := benchObjects()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := "bench"
	admin := adminIn(ctx, b, env, ns)
	variables := func(v string) []byte { return []byte(`{"release":"` + v + `"}`) }
	name := func(i int) string { return fmt.Sprintf("c%04d", i) }
	// The inputs each converged object renders: its spec's variables and the contract inputs of
	// a cluster owned by the Cluster of its own name.
	renderedHash := func(i int, release string) (string, error) {
		in := contract.Inputs{Role: contract.RoleCluster, ClusterName: name(i), Namespace: ns, Kind: infrav1.ClusterKind.Kind, Name: name(i)}
		r, err := inputs.Render("modules/net:v1", in.Variables(), variables(release), nil, nil)
		return r.Hash, err
	}
	stateDoc, _ := state.Compress([]byte(`{"version":4,"serial":1,"lineage":"l","resources":[{"mode":"managed","type":"terraform_data","name":"r","instances":[{}]}]}`))
	// Converged objects: a state that records the inputs the spec renders to, drift checks off.
	// The state Secret is there before its object, so an object the running manager sees being
	// created is converged already.
	create := func(from, to int) {
		if err := parallel(to-from, func(k int) error {
			i := from + k
			tc := &infrav1.TerraformCluster{
				ObjectMeta: metav1.ObjectMeta{Name: name(i), Namespace: ns, Finalizers: []string{"terraformcluster.infrastructure.cluster.x-k8s.io"}},
				Spec: infrav1.TerraformClusterSpec{
					WorkspaceSpec: infrav1.WorkspaceSpec{Source: infrav1.SourceSpec{Image: "modules/net:v1"}, Variables: &apiextensionsv1.JSON{Raw: variables("0")}},
					Drift:         infrav1.DriftSpec{IntervalSeconds: ptr.To[int64](0)},
				},
			}
			if err := capitest.Own(ctx, admin, tc); err != nil {
				return err
			}
			hash, err := renderedHash(i, "0")
			if err != nil {
				return err
			}
			// Labelled as the backend labels the state Secrets of the controller's runs.
			labels := jobs.OwnerLabels(jobs.KindCluster, name(i))
			labels["tfstate"] = "true"
			if err := admin.Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: state.SecretName(jobs.StateSecretSuffix(ns, jobs.KindCluster, name(i))), Namespace: ns,
					Labels: labels, Annotations: map[string]string{state.InputsHashAnnotation: hash}},
				Data: map[string][]byte{"tfstate": stateDoc},
			}); err != nil {
				return err
			}
			return admin.Create(ctx, tc)
		}); err != nil {
			b.Fatal(err)
		}
	}
	// Half the objects exist when the manager starts, the other half are made once it has
	// converged them: the heap between the two counts what each object adds, without the
	// manager's fixed costs.
	half := n / 2
	create(0, half)

	counter := &requestCounter{}
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = 500, 1000
	cfg.Wrap(counter.wrap)
	heapBefore := heapInUse(b, "before")
	mgr, err := ctrl.NewManager(cfg, controller.ManagerOptions(ctrl.Options{Scheme: controller.NewScheme(), Metrics: metricsserver.Options{BindAddress: "0"}}, controller.Scope{}))
	if err != nil {
		b.Fatal(err)
	}
	jobCache, err := captfcache.NewJobCache(cfg, "", nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := controller.Setup(mgr, controller.Options{RunnerImage: "captf/manager:bench", Registry: prometheus.NewRegistry(), Jobs: jobCache, RunKey: &benchKey}); err != nil {
		b.Fatal(err)
	}
	go func() { _ = mgr.Start(ctx) }()
	quiet := func() {
		// The manager is idle when its request count stops moving.
		last := int64(-1)
		_ = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 5*time.Minute, false, func(context.Context) (bool, error) {
			now := counter.reads.Load() + counter.writes.Load()
			done := now == last
			last = now
			return done, nil
		})
	}
	// converged waits until the manager has given each of the first count objects its status and
	// gone idle, and checks that it started no Job for them.
	converged := func(count int) {
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
			var list infrav1.TerraformClusterList
			if err := admin.List(ctx, &list, client.InNamespace(ns)); err != nil {
				return false, err
			}
			done := 0
			for _, tc := range list.Items {
				if len(tc.Status.Conditions) > 0 {
					done++
				}
			}
			return done >= count, nil
		}); err != nil {
			b.Fatal(err)
		}
		quiet()
		var started batchv1.JobList
		if err := admin.List(ctx, &started, client.InNamespace(ns), client.Limit(1)); err != nil {
			b.Fatal(err)
		}
		if len(started.Items) > 0 {
			b.Fatalf("Job %s started for a converged object", started.Items[0].Name)
		}
	}
	converged(half)
	heapHalf := heapInUse(b, "half")
	create(half, n)
	converged(n)
	heapObjects := heapInUse(b, "objects")
	retain(ctx, b, admin, jobCache, &benchKey, ns, n, name, func(i int) (string, error) { return renderedHash(i, "0") })
	quiet()
	heapRetained := heapInUse(b, "retained")
	watch := watchJobs(ctx, b, env.Config, ns)

	b.Run(fmt.Sprintf("resync-pass-%d-converged", n), func(b *testing.B) {
		for it := 0; it < b.N; it++ {
			reads, writes := counter.reads.Load(), counter.writes.Load()
			before := counter.snapshot()
			// Touch each object so every one is reconciled once, as a resync would.
			if err := parallel(n, func(i int) error {
				return admin.Patch(ctx, &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: name(i), Namespace: ns}},
					client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{"bench/touch":"%d"}}}`, it))))
			}); err != nil {
				b.Fatal(err)
			}
			quiet()
			for k, v := range counter.snapshot() {
				if v != before[k] {
					b.Logf("%s: %d", k, v-before[k])
				}
			}
			b.ReportMetric(float64(counter.writes.Load()-writes)/float64(n), "writes/object")
			b.ReportMetric(float64(counter.reads.Load()-reads)/float64(n), "uncached-reads/object")
		}
		if watch.count() != 0 {
			b.Fatalf("%d Jobs started for converged objects", watch.count())
		}
	})

	busy := map[string]bool{} // objects whose Job still runs (nothing runs Jobs here)
	// next is the next idle object to change: Go runs a sub-benchmark once with b.N = 1 before
	// its run of -benchtime, and a changed object's Job still runs.
	next := 0
	b.Run("one-spec-change-to-job", func(b *testing.B) {
		var latencies []time.Duration
		for it := 0; it < b.N; it++ {
			obj := name(next % n)
			next++
			start := time.Now()
			if err := admin.Patch(ctx, &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: obj, Namespace: ns}},
				client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"variables":{"release":"one-%d"}}}`, it)))); err != nil {
				b.Fatal(err)
			}
			if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
				_, ok := watch.at(obj)
				return ok, nil
			}); err != nil {
				b.Fatal(err)
			}
			seen, _ := watch.at(obj)
			latencies = append(latencies, seen.Sub(start))
			busy[obj] = true
			watch.reset()
		}
		sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
		b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds())/1000, "p50-ms")
	})

	b.Run(fmt.Sprintf("all-%d-inputs-changed", n), func(b *testing.B) {
		for it := 0; it < b.N; it++ {
			quiet()
			watch.reset()
			var idle []string
			for i := 0; i < n; i++ {
				if !busy[name(i)] {
					idle = append(idle, name(i))
				}
			}
			start := time.Now()
			if err := parallel(len(idle), func(i int) error {
				return admin.Patch(ctx, &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: idle[i], Namespace: ns}},
					client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"variables":{"release":"all-%d"}}}`, it))))
			}); err != nil {
				b.Fatal(err)
			}
			if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Minute, true, func(context.Context) (bool, error) {
				return watch.count() >= len(idle), nil
			}); err != nil {
				b.Fatalf("%d of %d Jobs: %v", watch.count(), len(idle), err)
			}
			controllerTime := time.Since(start)
			for _, o := range idle {
				busy[o] = true
			}
			floor := plainWrites(ctx, b, admin, ns, len(idle), it)
			b.ReportMetric(controllerTime.Seconds(), "controller-s")
			b.ReportMetric(floor.Seconds(), "plain-client-s")
			b.ReportMetric(controllerTime.Seconds()/floor.Seconds(), "x-floor")
			quiet()
		}
	})
	b.Run("memory", func(b *testing.B) {
		heapRuns := heapInUse(b, "runs")
		b.ReportMetric(float64(heapObjects.inUse-heapBefore.inUse)/float64(n), "heap-B/object")
		b.ReportMetric(float64(heapObjects.inUse-heapHalf.inUse)/float64(n-half), "heap-B/object-marginal")
		// The live objects alone: what the caches hold, without the free room in their spans.
		b.ReportMetric(float64(heapObjects.live-heapHalf.live)/float64(n-half), "live-B/object-marginal")
		b.ReportMetric(float64(heapRetained.inUse-heapObjects.inUse)/float64(n*retainedPerObject), "heap-B/retained-job")
		// A started run adds its Job and, while it runs, its per-run Secret.
		if len(busy) > 0 {
			b.ReportMetric(float64(heapRuns.inUse-heapRetained.inUse)/float64(len(busy)), "heap-B/started-run")
		}
	})
}

// retainedPerObject is the finished history each benchmark object keeps: within the default
// limits of 3 successes and 3 failures per op, a busy object's applies, drift checks and
// refreshes.
const retainedPerObject = 10

// retainedHistory is that history, oldest first per op.
var retainedHistory = []struct {
	op      jobs.Op
	attempt int32
	outcome jobs.Outcome
}{
	{jobs.OpApply, 1, jobs.OutcomeSucceeded},
	{jobs.OpApply, 2, jobs.OutcomeFailed},
	{jobs.OpApply, 3, jobs.OutcomeFailed},
	{jobs.OpApply, 4, jobs.OutcomeSucceeded},
	{jobs.OpDrift, 1, jobs.OutcomeSucceeded},
	{jobs.OpDrift, 2, jobs.OutcomeFailed},
	{jobs.OpDrift, 3, jobs.OutcomeSucceeded},
	{jobs.OpRefresh, 1, jobs.OutcomeSucceeded},
	{jobs.OpRefresh, 2, jobs.OutcomeSucceeded},
	{jobs.OpRefresh, 3, jobs.OutcomeSucceeded},
}

// benchKey is the run key the benchmark's controller signs with, and its Jobs are signed with.
var benchKey = func() runkey.Key {
	key, err := runkey.New()
	if err != nil {
		panic(err)
	}
	return key
}()

// retain gives each of the n objects its retainedHistory as the controller leaves it: Jobs built
// by jobspec with their pod templates, finished as the Job controller finishes them, bookkept,
// with their result summaries and digests, and signed with key. It returns once the manager's
// cache holds them all.
func retain(ctx context.Context, b *testing.B, c client.Client, cached *captfcache.JobCache, key *runkey.Key, ns string, n int, name func(int) string, inputsHash func(int) (string, error)) {
	errText := strings.Repeat("Error: creating resource: the provider said no. ", 6)
	if err := parallel(n, func(i int) error {
		var tc infrav1.TerraformCluster
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name(i)}, &tc); err != nil {
			return err
		}
		hash, err := inputsHash(i)
		if err != nil {
			return err
		}
		owner := metav1.NewControllerRef(&tc, infrav1.GroupVersion.WithKind(infrav1.ClusterKind.Kind))
		for _, h := range retainedHistory {
			in := jobs.NameInputs{Kind: jobs.KindCluster, Name: tc.Name, Op: h.op, Attempt: h.attempt}
			if h.op == jobs.OpApply {
				in.InputsHash = hash
			} else {
				in.Tick = strconv.Itoa(int(h.attempt))
			}
			jobName, err := jobs.JobName(in)
			if err != nil {
				return err
			}
			job := jobspec.Build(jobspec.Params{
				Kind: jobs.KindCluster, Namespace: ns, ObjectName: tc.Name, ClusterName: tc.Name, Owner: *owner,
				Name: jobName, Op: h.op, Attempt: h.attempt, InputsHash: hash,
				Source: tc.Spec.Source, RunnerImage: "captf/manager:bench",
				StateSuffix: jobs.StateSecretSuffix(ns, jobs.KindCluster, tc.Name),
			})
			summary := jobs.Summary{Outcome: h.outcome}
			switch {
			case h.outcome == jobs.OutcomeFailed:
				summary.Error = &jobs.ErrorSummary{Kind: jobs.ErrorKindStep, Step: string(h.op), Summary: errText}
			case h.op == jobs.OpDrift:
				summary.Drift = &jobs.DriftSummary{}
			default:
				summary.Changes = &jobs.Changes{Add: 1, Change: 2}
			}
			result, err := jobs.EncodeSummary(summary)
			if err != nil {
				return err
			}
			job.Annotations[jobs.AnnotationResult] = result
			job.Annotations[runkey.AnnotationResultDigest] = runkey.ResultDigest(result)
			job.Annotations[jobs.AnnotationBookkept] = "true"
			if err := c.Create(ctx, job); err != nil {
				return err
			}
			job.Annotations[runkey.AnnotationSignature] = key.SignJob(job)
			if err := c.Update(ctx, job); err != nil {
				return err
			}
			finished(job, h.outcome)
			if err := c.Status().Update(ctx, job); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		if cached.Len() < n*retainedPerObject {
			return false, nil
		}
		// Created first, finished next: the last object's newest Job shows when all have ended.
		list, err := cached.OwnerJobs(ns, jobs.KindCluster, name(n-1))
		if err != nil {
			return false, err
		}
		done := 0
		for i := range list {
			if jobs.FinishCondition(&list[i]) != nil {
				done++
			}
		}
		return done == retainedPerObject, nil
	}); err != nil {
		b.Fatal(err)
	}
}

// finished sets the status the Job controller gives a Job that ended with outcome.
func finished(job *batchv1.Job, outcome jobs.Outcome) {
	now := metav1.Now()
	start := job.CreationTimestamp
	job.Status.StartTime = &start
	cond := func(t batchv1.JobConditionType, reason string) batchv1.JobCondition {
		return batchv1.JobCondition{Type: t, Status: corev1.ConditionTrue, Reason: reason, Message: reason, LastTransitionTime: now, LastProbeTime: now}
	}
	if outcome == jobs.OutcomeSucceeded {
		job.Status.Succeeded = 1
		job.Status.CompletionTime = &now
		job.Status.Conditions = []batchv1.JobCondition{cond(batchv1.JobSuccessCriteriaMet, "CompletionsReached"), cond(batchv1.JobComplete, "CompletionsReached")}
		return
	}
	job.Status.Failed = 1
	job.Status.Conditions = []batchv1.JobCondition{cond(batchv1.JobFailureTarget, batchv1.JobReasonBackoffLimitExceeded), cond(batchv1.JobFailed, batchv1.JobReasonBackoffLimitExceeded)}
}

// plainWrites issues the writes of a first start of n objects' runs from a plain client, 16 at
// a time: what a first start writes once per object (its state Secret and lock Lease, its runner
// ServiceAccount, Role and RoleBinding), then the run Lease, the durable inputs, the Job, its
// signature, the per-run Secret, the block-move annotation and the status patch. It is the floor
// the controller is compared with; the events the controller records in the background are not
// counted.
func plainWrites(ctx context.Context, b *testing.B, c client.Client, ns string, n, it int) time.Duration {
	start := time.Now()
	if err := parallel(n, func(i int) error {
		id := fmt.Sprintf("plain-%d-%04d", it, i)
		meta := func(suffix string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: id + suffix, Namespace: ns} }
		for _, obj := range []client.Object{
			&corev1.Secret{ObjectMeta: meta("-state")},
			&coordinationv1.Lease{ObjectMeta: meta("-lock")},
			&corev1.ServiceAccount{ObjectMeta: meta("-runner")},
			&rbacv1.Role{ObjectMeta: meta("-runner"), Rules: workspace.RunnerRules(id)},
			&rbacv1.RoleBinding{ObjectMeta: meta("-runner"), RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: id + "-runner"},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: id + "-runner", Namespace: ns}}},
			&coordinationv1.Lease{ObjectMeta: meta(""), Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(id)}},
			&corev1.Secret{ObjectMeta: meta("-inputs"), Data: map[string][]byte{"main.tf.json": []byte("{}")}},
		} {
			if err := c.Create(ctx, obj); err != nil {
				return err
			}
		}
		job := &batchv1.Job{
			ObjectMeta: meta(""),
			Spec: batchv1.JobSpec{BackoffLimit: ptr.To[int32](0), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "x"}},
			}}},
		}
		if err := c.Create(ctx, job); err != nil {
			return err
		}
		if err := c.Patch(ctx, job, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"captf.io/signature":"x"}}}`))); err != nil {
			return err
		}
		if err := c.Create(ctx, &corev1.Secret{ObjectMeta: meta("-run"), Data: map[string][]byte{"main.tf.json": []byte("{}")}}); err != nil {
			return err
		}
		// The block-move annotation's patch goes to an object the controller does not watch,
		// so that the floor does not wake it.
		if err := c.Patch(ctx, &corev1.Secret{ObjectMeta: meta("-inputs")}, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"block-move":""}}}`))); err != nil {
			return err
		}
		obj := &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%04d", i), Namespace: ns}}
		return c.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(`{"status":{"observedGeneration":`+strconv.Itoa(it+1)+`}}`)))
	}); err != nil && !strings.Contains(err.Error(), "conflict") {
		b.Fatal(err)
	}
	return time.Since(start)
}

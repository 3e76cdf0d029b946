package crash

import (
	"context"

	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller"
	"github.com/captf/captf/controller/metrics"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/test/capitest"
	"github.com/captf/captf/test/reliability/rel"
	"github.com/captf/captf/test/testenv"
)

var _ events.EventRecorder = (*rel.Recorder)(nil)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	os.Exit(testenv.Main(m, testenv.Options{}))
}

const image = "registry.example/modules/net:v1"

var namespaces atomic.Int32

// world is a namespace of TerraformClusters driven pass by pass by reconcilers that may crash.
type world struct {
	t        *testing.T
	ctx      context.Context
	c        client.Client // the admin client, never faulted
	ns       string
	clock    *clocktesting.FakePassiveClock
	recorder *rel.Recorder
	reg      *prometheus.Registry
	metrics  *metrics.Metrics
	rng      *rand.Rand
	objects  []*infrav1.TerraformCluster
	serial   map[string]int64

	// uids remembers every Job name seen, to catch a reused name.
	uids map[string]string
	// finished are the Jobs the test finished, by name and by UID.
	finished    map[string]bool
	finishedUID map[string]bool
	// lost are Jobs whose finish event may be lost: a crash or fault hit after their bookkept mark.
	lost map[string]bool
	// leakWindow are Jobs marked bookkept whose per-run Secret delete was cut off.
	leakWindow map[string]bool
	// windows counts the crash windows hit.
	windows map[string]int
	errors  int
	// restarted counts Jobs started again under the name of a Job deleted as stuck.
	restarted int
}

func newWorld(t *testing.T, seed uint64, n int) *world {
	t.Helper()
	env := testenv.Get(t)
	c, err := client.New(env.Config, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("rel-%d", namespaces.Add(1))
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{
		t: t, ctx: ctx, c: c, ns: ns, reg: reg, metrics: m, rng: rel.NewRand(seed),
		clock:    clocktesting.NewFakePassiveClock(time.Now().Truncate(time.Second)),
		recorder: rel.NewRecorder(), serial: map[string]int64{},
		uids: map[string]string{}, finished: map[string]bool{}, finishedUID: map[string]bool{}, lost: map[string]bool{}, leakWindow: map[string]bool{}, windows: map[string]int{},
	}
	for i := 0; i < n; i++ {
		tc := &infrav1.TerraformCluster{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%d", i), Namespace: ns, Labels: map[string]string{jobs.LabelClusterName: fmt.Sprintf("c%d", i)}},
			Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: infrav1.WorkspaceSpec{
				Source:    infrav1.SourceSpec{Image: image},
				Variables: &apiextensionsv1.JSON{Raw: []byte(`{"v":0}`)},
			}},
		}
		if i%2 == 1 { // small history, so pruning runs often
			tc.Spec.Jobs.SuccessfulJobsHistoryLimit = ptr.To[int32](1)
			tc.Spec.Jobs.FailedJobsHistoryLimit = ptr.To[int32](1)
		}
		if err := capitest.Own(ctx, c, tc); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, tc); err != nil {
			t.Fatal(err)
		}
		w.objects = append(w.objects, tc)
	}
	return w
}

// reconciler builds a fresh reconciler (a restart) on a fresh faulting client.
func (w *world) reconciler() (*workspace.Reconciler, *rel.Client) {
	fc := rel.NewClient(w.c)
	base := workspace.Reconciler{Client: fc, APIReader: rel.Reader{Reader: w.c, C: fc}, Recorder: w.recorder, Clock: w.clock, Metrics: w.metrics, RunnerImage: "registry.example/captf/manager:test"}
	return workspace.New(base, infrav1.ClusterKind), fc
}

// pass runs one pass with the hook; it reports the result, whether it was killed and the error.
func (w *world) pass(obj client.Object, hook rel.Hook) (ctrl.Result, bool, error) {
	r, fc := w.reconciler()
	fc.SetHook(hook)
	res, err := r.Reconcile(w.ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
	return res, fc.Killed(), err
}

// settle runs clean passes while they ask to run again at once.
func (w *world) settle(obj client.Object) {
	w.t.Helper()
	for i := 0; i < 12; i++ {
		res, _, err := w.pass(obj, rel.Hook{})
		if err != nil {
			w.t.Fatalf("clean pass of %s: %v", obj.GetName(), err)
		}
		if !workspace.AgainAtOnce(res) {
			return
		}
	}
	w.t.Fatalf("%s did not settle in 12 passes", obj.GetName())
}

func (w *world) jobsOf(name string) []batchv1.Job {
	w.t.Helper()
	var list batchv1.JobList
	if err := w.c.List(w.ctx, &list, client.InNamespace(w.ns), client.MatchingLabels(jobs.OwnerLabels(jobs.KindCluster, name))); err != nil {
		w.t.Fatal(err)
	}
	return list.Items
}

func unfinished(all []batchv1.Job) []batchv1.Job {
	var out []batchv1.Job
	for _, j := range all {
		if !jobs.OutcomeOf(&j).Finished() {
			out = append(out, j)
		}
	}
	return out
}

// finishActive finishes the object's running Job, successfully with probability pSuccess.
func (w *world) finishActive(name string, pSuccess float64) {
	w.t.Helper()
	for _, j := range unfinished(w.jobsOf(name)) {
		ok := w.rng.Float64() < pSuccess
		if ok && jobs.OpOf(&j) == jobs.OpApply {
			w.writeState(name)
		}
		if err := rel.Finish(w.ctx, w.c, j, ok, rel.Result(&j, jobs.RunnerResult{}), w.clock.Now()); err != nil {
			w.t.Fatalf("finishing %s: %v", j.Name, err)
		}
		w.finished[j.Name] = true
		w.finishedUID[string(j.UID)] = true
	}
}

func (w *world) writeState(name string) {
	w.t.Helper()
	w.serial[name]++
	if err := rel.WriteState(w.ctx, w.c, w.ns, jobs.KindCluster, name, w.serial[name]); err != nil {
		w.t.Fatal(err)
	}
}

// changeInputs gives the object new variables, so a new apply is due.
func (w *world) changeInputs(tc *infrav1.TerraformCluster, v int) {
	w.t.Helper()
	var cur infrav1.TerraformCluster
	if err := w.c.Get(w.ctx, client.ObjectKeyFromObject(tc), &cur); err != nil {
		w.t.Fatal(err)
	}
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Spec.Variables = &apiextensionsv1.JSON{Raw: []byte(fmt.Sprintf(`{"v":%d}`, v))}
	if err := w.c.Patch(w.ctx, &cur, patch); err != nil {
		w.t.Fatal(err)
	}
}

// check asserts the invariants that hold after every pass, crashed or not.
func (w *world) check(where string, only ...string) {
	w.t.Helper()
	for _, tc := range w.objects {
		if len(only) > 0 && only[0] != tc.Name {
			continue
		}
		all := w.jobsOf(tc.Name)
		if u := unfinished(all); len(u) > 1 {
			w.t.Fatalf("%s: %s has %d unfinished Jobs: %v", where, tc.Name, len(u), names(u))
		}
		for _, j := range all {
			if uid, ok := w.uids[j.Name]; ok && uid != string(j.UID) {
				// A Job that never ran (deleted as stuck: crashed before its per-run Secret)
				// is started again under its name; one that ran must never be.
				if w.finishedUID[uid] {
					w.t.Fatalf("%s: Job name %s of a finished run reused (uid %s, before %s)", where, j.Name, j.UID, uid)
				}
				w.restarted++
			}
			w.uids[j.Name] = string(j.UID)
			if _, booked := j.Annotations[jobs.AnnotationBookkept]; booked {
				if n := w.recorder.Finished(j.Name); n > 1 {
					w.t.Fatalf("%s: Job %s got %d finish events", where, j.Name, n)
				}
			}
		}
	}
}

// checkConverged asserts what holds once faults stopped and every object settled.
func (w *world) checkConverged() (leaked []string) {
	w.t.Helper()
	eventsTotal := 0
	for name := range w.finished {
		n := w.recorder.Finished(name)
		eventsTotal += n
		switch {
		case n > 1:
			w.t.Errorf("Job %s booked %d times", name, n)
		case n == 0 && !w.lost[name]:
			w.t.Errorf("Job %s never announced, and no crash hit after its mark", name)
		}
	}
	if got := metricSum(w.t, w.reg, "captf_jobs_total"); int(got) != eventsTotal {
		w.t.Errorf("captf_jobs_total = %v, finish events = %d", got, eventsTotal)
	}
	for _, tc := range w.objects {
		all := w.jobsOf(tc.Name)
		var cur infrav1.TerraformCluster
		if err := w.c.Get(w.ctx, client.ObjectKeyFromObject(tc), &cur); err != nil {
			w.t.Fatal(err)
		}
		u := unfinished(all)
		switch {
		case len(u) == 0 && cur.Status.ActiveJob != nil:
			w.t.Errorf("%s: status.activeJob = %s but no Job runs; Jobs: %s", tc.Name, cur.Status.ActiveJob.Name, describeJobs(all))
		case len(u) == 1 && (cur.Status.ActiveJob == nil || cur.Status.ActiveJob.Name != u[0].Name):
			w.t.Errorf("%s: status.activeJob = %+v, running %s", tc.Name, cur.Status.ActiveJob, u[0].Name)
		}
		for _, j := range all {
			if !jobs.OutcomeOf(&j).Finished() {
				continue
			}
			if _, booked := j.Annotations[jobs.AnnotationBookkept]; !booked {
				w.t.Errorf("%s: finished Job %s not bookkept", tc.Name, j.Name)
				continue
			}
			var s corev1.Secret
			err := w.c.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: jobs.RunSecretName(j.Name)}, &s)
			if err == nil {
				leaked = append(leaked, j.Name)
				w.t.Errorf("per-run Secret of bookkept Job %s outlived its run", j.Name)
			} else if !apierrors.IsNotFound(err) {
				w.t.Fatal(err)
			}
		}
		// The run Lease is free or held by a Job that is not running.
		var l coordinationv1.Lease
		err := w.c.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: jobs.RunLeaseName(jobs.StateSecretSuffix(w.ns, jobs.KindCluster, tc.Name))}, &l)
		if err == nil && len(u) == 0 {
			holder := ptr.Deref(l.Spec.HolderIdentity, "")
			for _, j := range all {
				if j.Name == holder && !jobs.OutcomeOf(&j).Finished() {
					w.t.Errorf("%s: run Lease held by running Job %s", tc.Name, holder)
				}
			}
		}
	}
	return leaked
}

// converge stops faults: settles every object and finishes what runs, until nothing runs.
func (w *world) converge() {
	w.t.Helper()
	for round := 0; round < 20; round++ {
		running := 0
		for _, tc := range w.objects {
			w.settle(tc)
			if u := unfinished(w.jobsOf(tc.Name)); len(u) > 0 {
				running++
				w.finishActive(tc.Name, 1)
				w.settle(tc)
			}
		}
		w.check(fmt.Sprintf("converge round %d", round))
		if running == 0 {
			return
		}
	}
	w.t.Fatal("did not converge in 20 rounds")
}

func names(list []batchv1.Job) []string {
	var out []string
	for _, j := range list {
		out = append(out, j.Name)
	}
	return out
}

func metricSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

func table(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %5d  %s\n", m[k], k)
	}
	return b.String()
}

func requestFor(obj interface {
	GetName() string
	GetNamespace() string
}) ctrl.Request {
	return ctrl.Request{NamespacedName: client.ObjectKey{Namespace: obj.GetNamespace(), Name: obj.GetName()}}
}

func describeJobs(all []batchv1.Job) string {
	var b strings.Builder
	for _, j := range all {
		fmt.Fprintf(&b, "\n  %s outcome=%s bookkept=%q", j.Name, jobs.OutcomeOf(&j), j.Annotations[jobs.AnnotationBookkept])
	}
	return b.String()
}

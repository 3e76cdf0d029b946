package registry

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/utils/ptr"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/apis/runs"
	"github.com/captf/captf/jobs"
)

// seen is an event as a test expects it: type, name and, for runs, phase.
type seen struct {
	typ   watch.EventType
	name  string
	phase string
}

func (s seen) String() string { return fmt.Sprintf("%s %s %s", s.typ, s.name, s.phase) }

// next reads the next event, failing after a deadline.
func next(t *testing.T, w watch.Interface) seen {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("the watch ended")
		}
		switch o := unshared(ev.Object).(type) {
		case *runs.Run:
			return seen{ev.Type, o.Name, string(o.Status.Phase)}
		case *runs.Plan:
			return seen{ev.Type, o.Name, string(o.Status.Phase)}
		}
		t.Fatalf("unexpected object %T", ev.Object)
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
	}
	return seen{}
}

// expect reads len(want) events, in any order, and compares them with want.
func expect(t *testing.T, w watch.Interface, want ...seen) {
	t.Helper()
	got := map[string]int{}
	for range want {
		got[next(t, w).String()]++
	}
	for _, s := range want {
		if got[s.String()] == 0 {
			t.Fatalf("missing event %q; got %v", s, got)
		}
		got[s.String()]--
	}
}

// quiet checks that no event is pending.
func quiet(t *testing.T, w watch.Interface) {
	t.Helper()
	select {
	case ev := <-w.ResultChan():
		t.Fatalf("unexpected event %s %v", ev.Type, ev.Object)
	case <-time.After(50 * time.Millisecond):
	}
}

func watchRuns(t *testing.T, src *Source, opts *metainternalversion.ListOptions) watch.Interface {
	t.Helper()
	ctx, cancel := context.WithCancel(genericapirequest.WithNamespace(context.Background(), "team-a"))
	t.Cleanup(cancel)
	w, err := NewRunREST(src).Watch(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

func TestWatchFollowsAJobFromCreationToDeletion(t *testing.T) {
	src := newTestSource(t, cluster("team-a", "web", nil, nil, nil))
	w := watchRuns(t, src, &metainternalversion.ListOptions{ResourceVersion: src.listRV()})

	job := newJob("team-a", "web", jobs.OpApply, 1)
	src.testAddJob(t, job)
	expect(t, w, seen{watch.Added, job.Name, "Pending"})

	started(t0.Add(-time.Minute))(job)
	src.testUpdateJob(t, job)
	expect(t, w, seen{watch.Modified, job.Name, "Running"})

	failed(t0)(job)
	src.testUpdateJob(t, job)
	expect(t, w, seen{watch.Modified, job.Name, "Failed"})

	src.testDeleteJob(t, job)
	expect(t, w, seen{watch.Deleted, job.Name, "Failed"})
	quiet(t, w)
}

func TestWatchReportsSiblingsWhoseComputedFieldsChange(t *testing.T) {
	first := newJob("team-a", "web", jobs.OpApply, 1, failed(t0.Add(-10*time.Minute)))
	src := newTestSource(t, first, cluster("team-a", "web", nil, nil, nil))
	w := watchRuns(t, src, &metainternalversion.ListOptions{ResourceVersion: src.listRV()})

	// A second failure takes the backoff window over and pushes the first down the history.
	second := newJob("team-a", "web", jobs.OpApply, 2, failed(t0))
	src.testAddJob(t, second)
	expect(t, w, seen{watch.Added, second.Name, "Failed"}, seen{watch.Modified, first.Name, "Failed"})
	r, _ := src.getRun("team-a", first.Name)
	if r.Status.Backoff != nil || r.Status.Retention != runs.RetentionWithinLimit {
		t.Errorf("the first failure still looks newest: %+v", r.Status)
	}

	// A failed limit of 1 marks the first for pruning and puts the second at the cap.
	src.testUpdateOwner(t, cluster("team-a", "web", ptr.To[int32](1), nil, nil))
	expect(t, w, seen{watch.Modified, first.Name, "Failed"}, seen{watch.Modified, second.Name, "Failed"})
	if r, _ := src.getRun("team-a", second.Name); r.Status.Backoff.Delay.Duration != jobs.BackoffCap {
		t.Errorf("backoff at the limit = %+v", r.Status.Backoff)
	}
	quiet(t, w)
}

func TestWatchWithAFieldSelectorSeesRunsLeaveIt(t *testing.T) {
	src := newTestSource(t, cluster("team-a", "web", nil, nil, nil))
	job := newJob("team-a", "web", jobs.OpRefresh, 1, started(t0))
	src.testAddJob(t, job)
	opts := &metainternalversion.ListOptions{ResourceVersion: "0", FieldSelector: fields.OneTermEqualSelector("status.phase", "Running")}
	w := watchRuns(t, src, opts)
	expect(t, w, seen{watch.Added, job.Name, "Running"})

	succeeded(t0)(job)
	src.testUpdateJob(t, job)
	ev := <-w.ResultChan()
	if ev.Type != watch.Deleted || unshared(ev.Object).(*runs.Run).ResourceVersion != job.ResourceVersion {
		t.Fatalf("event = %s %+v, want DELETED at the Job's new resourceVersion %s", ev.Type, unshared(ev.Object).(*runs.Run).ObjectMeta, job.ResourceVersion)
	}
	quiet(t, w)
}

func TestWatchFromAResourceVersionReplaysWhatCameAfter(t *testing.T) {
	src := newTestSource(t, cluster("team-a", "web", nil, nil, nil))
	a := newJob("team-a", "web", jobs.OpApply, 1)
	src.testAddJob(t, a)
	listRV := src.listRV()
	if listRV != a.ResourceVersion {
		t.Fatalf("list resourceVersion %s, want the last Job's %s", listRV, a.ResourceVersion)
	}
	b := newJob("team-a", "web", jobs.OpDrift, 1)
	src.testAddJob(t, b)

	w := watchRuns(t, src, &metainternalversion.ListOptions{ResourceVersion: listRV})
	expect(t, w, seen{watch.Added, b.Name, "Pending"})
	quiet(t, w)
}

func TestWatchFromAnEvictedResourceVersionIsGone(t *testing.T) {
	src := newTestSource(t, cluster("team-a", "web", nil, nil, nil))
	first := "500"
	for i := 0; i <= hubHistory; i++ {
		src.runHub.publish([]hubEvent{{key: uint64(1000 + i), typ: watch.Added, new: &runs.Run{ObjectMeta: metav1.ObjectMeta{Name: strconv.Itoa(i), Namespace: "x"}}}})
	}
	_, err := NewRunREST(src).Watch(genericapirequest.WithNamespace(context.Background(), "team-a"), &metainternalversion.ListOptions{ResourceVersion: first})
	if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Fatalf("err = %v, want 410 Gone", err)
	}
	if _, err := NewRunREST(src).Watch(context.Background(), &metainternalversion.ListOptions{ResourceVersion: "1001"}); err != nil {
		t.Fatalf("a resourceVersion still in the history: %v", err)
	}
}

func TestWatchListEndsInitialEventsWithABookmark(t *testing.T) {
	job := newJob("team-a", "web", jobs.OpApply, 1)
	src := newTestSource(t, job)
	w := watchRuns(t, src, &metainternalversion.ListOptions{SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	expect(t, w, seen{watch.Added, job.Name, "Pending"})
	ev := <-w.ResultChan()
	m := ev.Object.(*runs.Run)
	if ev.Type != watch.Bookmark || m.Annotations[metav1.InitialEventsAnnotationKey] != "true" || m.ResourceVersion != src.listRV() {
		t.Fatalf("event = %s %+v, want the initial-events-end bookmark", ev.Type, m.ObjectMeta)
	}
}

func TestPlanWatchSeesTheApproval(t *testing.T) {
	plan := newJob("team-a", "web", jobs.OpPlan, 1, succeeded(t0), withResult(jobs.Summary{Plan: &jobs.PlanSummary{Hash: planHash}}))
	preview := &infrav1.PlanPreview{InputsHash: inputsHash, PlanHash: planHash, Job: plan.Name}
	src := newTestSource(t, plan, cluster("team-a", "web", nil, preview, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := NewPlanREST(src).Watch(ctx, &metainternalversion.ListOptions{ResourceVersion: src.listRV()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	src.testUpdateOwner(t, cluster("team-a", "web", nil, preview, map[string]string{jobs.AnnotationApprovePlan: planHash, jobs.AnnotationApprovedBy: "alice"}))
	expect(t, w, seen{watch.Modified, plan.Name, "Approved"})
}

func TestAStoppedWatcherIsRemoved(t *testing.T) {
	src := newTestSource(t)
	w, err := NewRunREST(src).Watch(context.Background(), &metainternalversion.ListOptions{ResourceVersion: src.listRV()})
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
	if _, ok := <-w.ResultChan(); ok {
		t.Fatal("the result channel is open after Stop")
	}
	if n := src.runHub.watcherCount(); n != 0 {
		t.Fatalf("%d watchers after Stop", n)
	}
}

// TestWatchesStartingTogetherShareTheirInitialObjects: watches of one selection that start
// before the next change share one computation of the current objects; a change, or a second's
// age, makes the next watch compute them again.
func TestWatchesStartingTogetherShareTheirInitialObjects(t *testing.T) {
	clock := time.Unix(100, 0)
	h := newHub(func() runtime.Object { return &runs.Run{} }, runFieldSet, func() time.Time { return clock })
	computed := 0
	list := func() []runtime.Object { computed++; return []runtime.Object{&runs.Run{}} }
	sel := selection{namespace: "ns"}
	start := func() {
		w, err := h.watch(sel, "", list, func() string { return "1" }, false)
		if err != nil {
			t.Fatal(err)
		}
		w.Stop()
	}
	start()
	start()
	if computed != 1 {
		t.Fatalf("two watches starting together computed the objects %d times, want 1", computed)
	}
	h.publish([]hubEvent{{key: 2, typ: watch.Added, new: &runs.Run{}}})
	start()
	if computed != 2 {
		t.Fatalf("a watch after a change computed %d times in all, want 2", computed)
	}
	clock = clock.Add(initialMemoAge)
	start()
	if computed != 3 {
		t.Fatalf("a watch a second later computed %d times in all, want 3", computed)
	}
	other := selection{namespace: "other"}
	if w, err := h.watch(other, "", list, func() string { return "1" }, false); err != nil {
		t.Fatal(err)
	} else {
		w.Stop()
	}
	if computed != 4 {
		t.Fatalf("a watch of another selection computed %d times in all, want 4", computed)
	}
	clock = clock.Add(initialMemoAge)
	start()
	if len(h.initialMemo) != 1 {
		t.Fatalf("%d shared initial lists kept after a second without watches of the other selection, want 1", len(h.initialMemo))
	}
}

// TestWatchesQueuedBehindASlowComputationShareIt: the shared initial objects age from when
// their computation ends, so the watches that waited for a computation longer than the sharing
// window still share its result instead of each computing a copy.
func TestWatchesQueuedBehindASlowComputationShareIt(t *testing.T) {
	clock := time.Unix(100, 0)
	h := newHub(func() runtime.Object { return &runs.Run{} }, runFieldSet, func() time.Time { return clock })
	computed := 0
	slowList := func() []runtime.Object {
		computed++
		clock = clock.Add(3 * initialMemoAge)
		return []runtime.Object{&runs.Run{}}
	}
	sel := selection{namespace: "ns"}
	for range 3 {
		w, err := h.watch(sel, "", slowList, func() string { return "1" }, false)
		if err != nil {
			t.Fatal(err)
		}
		w.Stop()
	}
	if computed != 1 {
		t.Fatalf("three watches behind a computation of 3s computed the objects %d times, want 1", computed)
	}
}

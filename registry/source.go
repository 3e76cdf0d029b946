package registry

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/captf/captf/apis/runs"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/runkey"
)

// Source is the read side of the server: the managed Jobs and the objects they run for, as
// compact records (the Jobs in its own store, fed by a Reflector; the objects in informer
// stores), and the watch hubs of runs and plans fed from their changes. Every run and plan is
// computed from it on request; nothing else is kept.
type Source struct {
	jobs   *jobStore
	owners map[jobs.Kind]cache.Indexer

	// informers are the informers of the owning objects; nil in tests that fill the stores.
	informers []cache.SharedIndexInformer
	// jobReflector fills jobs through jobFeed; nil in tests.
	jobReflector *cache.Reflector
	jobFeed      *jobFeed

	// now is the clock; tests fix it.
	now func() time.Time

	runHub  *hub
	planHub *hub

	// processedRV is the highest Job resourceVersion whose event the hubs have published; it is
	// the resourceVersion of lists.
	processedRV atomic.Uint64
	// publishMu orders the publication of events from the Job and owner informers.
	publishMu sync.Mutex
	// memo shares label maps and owner references among published runs and plans; under
	// publishMu.
	memo *jobMemo
	// synced is set once every informer has synced; events of the initial lists are not
	// published.
	synced atomic.Bool
	// catchUpWait is how long a list at an exact resourceVersion waits for one the Source has
	// not reached (see listVersionOf); tests shorten it.
	catchUpWait time.Duration
	// runKey is the install's run key once known (see LoadRunKey); nil until then, when no
	// plan verifies. It is set once, under publishMu.
	runKey atomic.Pointer[runkey.Key]
}

// newSource returns a Source over the given stores.
func newSource(jobStore *jobStore, owners map[jobs.Kind]cache.Indexer, now func() time.Time) *Source {
	if now == nil {
		now = time.Now
	}
	s := &Source{jobs: jobStore, owners: owners, now: now, memo: newJobMemo(), catchUpWait: catchUpWait}
	s.runHub = newHub(func() runtime.Object { return &runs.Run{} }, runFieldSet, now)
	s.planHub = newHub(func() runtime.Object { return &runs.Plan{} }, planFieldSet, now)
	return s
}

// HasSynced reports whether every informer has delivered its initial list.
func (s *Source) HasSynced() bool {
	if s.jobFeed != nil && !s.jobFeed.hasSynced() {
		return false
	}
	for _, i := range s.informers {
		if !i.HasSynced() {
			return false
		}
	}
	return true
}

// markSynced starts publishing events; the Source is ready.
func (s *Source) markSynced() { s.synced.Store(true) }

// ready returns 503 Service Unavailable until the stores are synced, so that nobody mistakes
// a half-filled cache for the truth.
func (s *Source) ready() error {
	if s.synced.Load() {
		return nil
	}
	return apierrors.NewServiceUnavailable("the runs.captf.io cache of Jobs and their objects is not synced yet")
}

// listRV is the resourceVersion of a list: the newest Job version published to watchers, and
// before any was published the version of the Job informer's initial list.
func (s *Source) listRV() string {
	if rv := s.processedRV.Load(); rv > 0 {
		return strconv.FormatUint(rv, 10)
	}
	if s.jobReflector != nil {
		return s.jobReflector.LastSyncResourceVersion()
	}
	return "0"
}

// job returns the record of a Job by namespace and name.
func (s *Source) job(namespace, name string) (*jobRecord, bool) {
	return s.jobs.get(namespace, name)
}

// owner returns the record of the object of that kind, namespace and name, if the store has it.
func (s *Source) owner(namespace string, kind jobs.Kind, name string) *ownerRecord {
	store := s.owners[kind]
	if store == nil {
		return nil
	}
	obj, ok, err := store.GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil
	}
	r, _ := ownerRecordOf(obj)
	return r
}

// siblings returns the records of every retained Job with ownerKey: the runs of the object of
// that kind and name, and of earlier objects of the same name (see objectRuns).
func (s *Source) siblings(ownerKey string) []*jobRecord { return s.jobs.ofOwner(ownerKey) }

// ownerOf returns the object the store knows by the owner key of r, a run; nil when it knows
// none.
func (s *Source) ownerOf(r *jobRecord) *ownerRecord {
	ref := r.target.Value().ref
	return s.owner(r.namespace(), jobs.Kind(ref.kind), ref.name)
}

// group is the retained Jobs of one object, and the object when the store has it.
type group struct {
	jobs  []batchv1.Job
	owner *ownerRecord
	// verify tells whether a plan's Job is as the controller signed it; see Source.verifier.
	verify func(*batchv1.Job) bool
}

// groupsOf builds the groups of records, all of one owner key, as the object the store knows
// by that key sees them: its runs only, or each object's runs when it knows none.
func (s *Source) groupsOf(records []*jobRecord) []group {
	if len(records) == 0 {
		return nil
	}
	return s.groupsWith(records, s.ownerOf(records[0]), nil)
}

// groupsWith builds the group of each object among records, all of one owner key, as owner
// (nil when the store knows no object of that key) sees them (see objectRuns), rebuilding
// their Jobs through memo (see jobMemo).
func (s *Source) groupsWith(records []*jobRecord, owner *ownerRecord, memo *jobMemo) []group {
	split := objectRuns(records, owner)
	out := make([]group, len(split))
	verify := s.verifier()
	for i, rs := range split {
		out[i] = group{jobs: make([]batchv1.Job, len(rs)), owner: owner, verify: verify}
		for k, r := range rs {
			out[i].jobs[k] = r.jobWith(memo)
		}
	}
	return out
}

// findJob returns the group that has the Job named name and its index there; the index is -1
// when none has it.
func findJob(groups []group, name string) (group, int) {
	for _, g := range groups {
		if i := g.indexOf(name); i >= 0 {
			return g, i
		}
	}
	return group{}, -1
}

// limits are the object's history limits, the defaults when the object is not known.
func (g group) limits() jobs.Limits {
	if g.owner == nil {
		return jobs.Limits{}
	}
	return g.owner.limits
}

// planOwner is what the plan phase needs from the object, and the check of the plans' Jobs.
func (g group) planOwner() jobs.PlanOwner {
	if g.owner == nil {
		return jobs.PlanOwner{Verify: g.verify}
	}
	owner := PlanOwnerOf(g.owner.Annotations, g.owner.plan)
	owner.UID, owner.Verify = g.owner.UID, g.verify
	return owner
}

// history indexes the group's Jobs once for the views of many of its runs.
func (g group) history() *jobs.History { return jobs.NewHistory(g.jobs, g.limits()) }

// run computes the run of the group's Job at index i.
func (g group) run(i int, now time.Time) *runs.Run {
	return RunOf(&g.jobs[i], g.jobs, g.limits(), now)
}

// plan computes the plan of the group's Job at index i, if it carries one.
func (g group) plan(i int) (*runs.Plan, bool) {
	return PlanOf(&g.jobs[i], g.jobs, g.planOwner())
}

// indexOf returns the index of the Job named name in the group, or -1.
func (g group) indexOf(name string) int {
	for i := range g.jobs {
		if g.jobs[i].Name == name {
			return i
		}
	}
	return -1
}

// selection is what a list or a watch selects: a namespace ("" for all), labels and fields.
type selection struct {
	namespace string
	label     labels.Selector
	field     fields.Selector
}

// key names the selection: two selections with the same key select the same objects.
func (sel selection) key() string {
	key := sel.namespace
	if sel.label != nil {
		key += "\x00" + sel.label.String()
	}
	if sel.field != nil {
		key += "\x00" + sel.field.String()
	}
	return key
}

// matches reports whether obj, a run or a plan, is selected, given its field set.
func (sel selection) matches(obj metav1.Object, fieldSet fields.Set) bool {
	if sel.namespace != "" && obj.GetNamespace() != sel.namespace {
		return false
	}
	if sel.label != nil && !sel.label.Matches(labels.Set(obj.GetLabels())) {
		return false
	}
	return sel.field == nil || sel.field.Matches(fieldSet)
}

// keepsRecord reports whether the run of r may be in the selection: its namespace, labels and
// name match. Field selectors on computed fields are applied to the run.
func (sel selection) keepsRecord(r *jobRecord) bool {
	if sel.namespace != "" && r.namespace() != sel.namespace {
		return false
	}
	if name, byName := sel.fieldValue("metadata.name"); byName && r.name != name {
		return false
	}
	return sel.label == nil || sel.label.Empty() || sel.label.Matches(r.labelSet())
}

// candidates returns the records in the selection's namespace whose labels match, grouped by
// object; field selectors on computed fields are applied by the caller.
func (s *Source) candidates(sel selection) map[string][]*jobRecord {
	byOwner := map[string][]*jobRecord{}
	prefix := sel.namespace + "/"
	for _, key := range s.jobs.ownerKeys() {
		if sel.namespace != "" && !strings.HasPrefix(key, prefix) {
			continue
		}
		for _, r := range s.jobs.ofOwner(key) {
			if sel.keepsRecord(r) {
				byOwner[key] = append(byOwner[key], r)
			}
		}
	}
	return byOwner
}

// fieldValue returns the value an exact field requirement demands.
func (sel selection) fieldValue(field string) (string, bool) {
	if sel.field == nil {
		return "", false
	}
	return sel.field.RequiresExactMatch(field)
}

// listRuns computes the selected runs, sorted by namespace and name: the initial objects of a
// watch.
func (s *Source) listRuns(sel selection) []*runs.Run {
	var out []*runs.Run
	s.eachRun(sel, s.candidates(sel), func(run *runs.Run) { out = append(out, run) })
	slices.SortFunc(out, func(a, b *runs.Run) int { return compareObjects(a, b) })
	return out
}

// runItems computes the selected runs as the items of a list, sorted by namespace and name.
// Each run is copied into the items as it is computed, so that a list does not hold every run
// twice, and the items are allocated once: a candidate record makes at most one run.
func (s *Source) runItems(sel selection) []runs.Run {
	candidates := s.candidates(sel)
	n := 0
	for _, records := range candidates {
		n += len(records)
	}
	out := make([]runs.Run, 0, n)
	s.eachRun(sel, candidates, func(run *runs.Run) { out = append(out, *run) })
	if len(out) < cap(out)/2 {
		// A field selector on a computed field left most of the items unused; the list keeps
		// only what it selected.
		out = append(make([]runs.Run, 0, len(out)), out...)
	}
	sortItems(out)
	return out
}

// eachRun calls emit with each run of candidates (see candidates) that the field selector
// selects, in no particular order.
func (s *Source) eachRun(sel selection, candidates map[string][]*jobRecord, emit func(*runs.Run)) {
	now := s.now()
	for key, selected := range candidates {
		for _, g := range s.groupsOf(s.siblings(key)) {
			h := g.history()
			for _, r := range selected {
				i := h.Index(r.name)
				if i < 0 {
					continue
				}
				run := runOfView(h.Job(i), h.ViewRun(i, now))
				if sel.field == nil || sel.field.Empty() || sel.field.Matches(runFieldSet(run)) {
					emit(run)
				}
			}
		}
	}
}

// listPlans computes the selected plans, sorted by namespace and name: the initial objects of
// a watch.
func (s *Source) listPlans(sel selection) []*runs.Plan {
	var out []*runs.Plan
	s.eachPlan(sel, s.candidates(sel), func(plan *runs.Plan) { out = append(out, plan) })
	slices.SortFunc(out, func(a, b *runs.Plan) int { return compareObjects(a, b) })
	return out
}

// planItems computes the selected plans as the items of a list, sorted by namespace and name,
// each copied into the items as it is computed, as runItems does. Most Jobs carry no plan, so
// the items grow as plans are found.
func (s *Source) planItems(sel selection) []runs.Plan {
	var out []runs.Plan
	s.eachPlan(sel, s.candidates(sel), func(plan *runs.Plan) { out = append(out, *plan) })
	sortItems(out)
	return out
}

// eachPlan calls emit with each plan of candidates (see candidates) that the field selector
// selects, in no particular order. The views of an object's Jobs are built only when one of its
// selected records carries a plan.
func (s *Source) eachPlan(sel selection, candidates map[string][]*jobRecord, emit func(*runs.Plan)) {
	for key, selected := range candidates {
		var (
			groups []group
			built  bool
		)
		for _, r := range selected {
			job := r.job()
			if _, ok := jobs.PlanSourceOf(&job); !ok {
				continue
			}
			if !built {
				groups, built = s.groupsOf(s.siblings(key)), true
			}
			g, i := findJob(groups, r.name)
			if i < 0 {
				continue
			}
			plan, ok := g.plan(i)
			if ok && (sel.field == nil || sel.field.Empty() || sel.field.Matches(planFieldSet(plan))) {
				emit(plan)
			}
		}
	}
}

// compareObjects orders runs and plans by namespace, then name: the order of lists.
func compareObjects(a, b metav1.Object) int {
	return cmp.Or(cmp.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetName(), b.GetName()))
}

// sortItems sorts the items of a list by namespace and name. It sorts their indexes, then moves
// each item once to its place along the cycles of that order, rather than swapping the items,
// which are large, as often as a sort would.
func sortItems[T any, P interface {
	*T
	metav1.Object
}](items []T) {
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return compareObjects(P(&items[a]), P(&items[b])) })
	// Place i takes the item at order[i]; order[i] == i marks a place that holds its item.
	for i := range items {
		if order[i] == i {
			continue
		}
		first := items[i]
		j := i
		for order[j] != i {
			next := order[j]
			items[j] = items[next]
			order[j] = j
			j = next
		}
		items[j] = first
		order[j] = j
	}
}

// getRun computes one run.
func (s *Source) getRun(namespace, name string) (*runs.Run, bool) {
	r, ok := s.job(namespace, name)
	if !ok {
		return nil, false
	}
	g, i := findJob(s.groupsOf(withRecord(s.siblings(r.ownerKey()), r)), name)
	if i < 0 {
		return nil, false
	}
	return g.run(i, s.now()), true
}

// getPlan computes one plan.
func (s *Source) getPlan(namespace, name string) (*runs.Plan, bool) {
	r, ok := s.job(namespace, name)
	if !ok {
		return nil, false
	}
	g, i := findJob(s.groupsOf(withRecord(s.siblings(r.ownerKey()), r)), name)
	if i < 0 {
		return nil, false
	}
	return g.plan(i)
}

// withRecord returns records with r in place of the record of the same name, or added.
func withRecord(records []*jobRecord, r *jobRecord) []*jobRecord {
	out := make([]*jobRecord, 0, len(records)+1)
	for _, x := range records {
		if x.name != r.name {
			out = append(out, x)
		}
	}
	return append(out, r)
}

// withoutRecord returns records without the record named name.
func withoutRecord(records []*jobRecord, name string) []*jobRecord {
	out := make([]*jobRecord, 0, len(records))
	for _, x := range records {
		if x.name != name {
			out = append(out, x)
		}
	}
	return out
}

// views computes the runs and plans of groups, all of one owner key, by name.
func (s *Source) views(groups []group, now time.Time) (map[string]*runs.Run, map[string]*runs.Plan) {
	rs, ps := map[string]*runs.Run{}, map[string]*runs.Plan{}
	for _, g := range groups {
		for _, run := range RunsOf(g.history(), now) {
			rs[run.Name] = run
		}
		for i := range g.jobs {
			if p, ok := g.plan(i); ok {
				ps[g.jobs[i].Name] = p
			}
		}
	}
	return rs, ps
}

// onJobEvent publishes what a Job event changes: the run (and plan) of the Job itself, ADDED,
// MODIFIED or DELETED, and MODIFIED for the other runs and plans of the same object whose
// computed fields the event changed (retention, retry number, backoff window, plan phase).
// before and after are the Job's records; before is nil for an add, after nil for a delete.
func (s *Source) onJobEvent(before, after *jobRecord) {
	if before != nil && after != nil && before.ownerKey() != after.ownerKey() {
		// The Job's controller reference now names another object: its run leaves the one
		// history and joins the other.
		gone := before.DeepCopyObject().(*jobRecord)
		gone.resourceVersion = after.resourceVersion
		s.onJobEvent(gone, nil)
		s.onJobEvent(nil, after)
		return
	}
	rec := after
	if rec == nil {
		rec = before
	}
	rv, _ := strconv.ParseUint(rec.resourceVersion, 10, 64)
	if !s.synced.Load() {
		s.bumpProcessed(rv)
		return
	}
	s.publishMu.Lock()
	defer s.publishMu.Unlock()

	current := withoutRecord(s.siblings(rec.ownerKey()), rec.name)
	var old, cur []*jobRecord
	old, cur = current, current
	if before != nil {
		old = withRecord(current, before)
	}
	if after != nil {
		cur = withRecord(current, after)
	}
	now, owner := s.now(), s.ownerOf(rec)
	oldRuns, oldPlans := s.views(s.groupsWith(old, owner, s.memo), now)
	newRuns, newPlans := s.views(s.groupsWith(cur, owner, s.memo), now)
	s.runHub.publish(changes(oldRuns, newRuns, rv, false))
	s.planHub.publish(changes(oldPlans, newPlans, rv, false))
	s.bumpProcessed(rv)
}

// onOwnerEvent publishes the runs and plans of an object whose history limits, plan or
// approval changed. Their resourceVersion stays their Job's; the events are replayed to a
// watch that starts at the current list resourceVersion.
func (s *Source) onOwnerEvent(before, after *ownerRecord) {
	if !s.synced.Load() {
		return
	}
	rec := after
	if rec == nil {
		rec = before
	}
	s.publishMu.Lock()
	defer s.publishMu.Unlock()
	records := s.siblings(rec.key())
	if len(records) == 0 {
		return
	}
	// Which Jobs are the object's runs depends on its UID: a new object of the same name
	// hides the runs of the earlier one, and deleting it shows them again.
	now := s.now()
	oldRuns, oldPlans := s.views(s.groupsWith(records, before, s.memo), now)
	newRuns, newPlans := s.views(s.groupsWith(records, after, s.memo), now)
	key := s.processedRV.Load()
	s.runHub.publish(changes(oldRuns, newRuns, key, true))
	s.planHub.publish(changes(oldPlans, newPlans, key, true))
}

// bumpProcessed raises processedRV to rv.
func (s *Source) bumpProcessed(rv uint64) {
	for {
		cur := s.processedRV.Load()
		if rv <= cur || s.processedRV.CompareAndSwap(cur, rv) {
			return
		}
	}
}

// changes turns the views of one object before and after a change into hub events: ADDED for a
// new name, DELETED for a gone one, MODIFIED for a changed one.
func changes[T runtime.Object](before, after map[string]T, key uint64, inclusive bool) []hubEvent {
	var out []hubEvent
	for name, b := range before {
		a, ok := after[name]
		switch {
		case !ok:
			out = append(out, hubEvent{key: key, inclusive: inclusive, typ: watch.Deleted, old: b})
		case !equality.Semantic.DeepEqual(b, a):
			out = append(out, hubEvent{key: key, inclusive: inclusive, typ: watch.Modified, old: b, new: a})
		}
	}
	for name, a := range after {
		if _, ok := before[name]; !ok {
			out = append(out, hubEvent{key: key, inclusive: inclusive, typ: watch.Added, new: a})
		}
	}
	return out
}

// ownerEventHandler feeds owner informer events to onOwnerEvent.
func (s *Source) ownerEventHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if r, ok := ownerRecordOf(obj); ok && !initial {
				s.onOwnerEvent(nil, r)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := ownerRecordOf(oldObj)
			n, ok2 := ownerRecordOf(newObj)
			if ok1 && ok2 && o.ResourceVersion != n.ResourceVersion {
				s.onOwnerEvent(o, n)
			}
		},
		DeleteFunc: func(obj any) {
			if r, ok := ownerRecordOf(obj); ok {
				s.onOwnerEvent(r, nil)
			}
		},
	}
}

// Run starts the informers and marks the Source ready once they have synced. It returns when
// they have synced, or with an error when ctx ends first.
func (s *Source) Run(ctx context.Context) error {
	if s.jobReflector != nil {
		go s.jobReflector.RunWithContext(ctx)
	}
	for _, i := range s.informers {
		go i.RunWithContext(ctx)
	}
	if !cache.WaitForCacheSync(ctx.Done(), s.HasSynced) {
		return fmt.Errorf("waiting for the Job and object caches to sync: %w", ctx.Err())
	}
	s.markSynced()
	klog.FromContext(ctx).Info("Caches synced", "jobs", s.jobs.len(), "resourceVersion", s.listRV())
	return nil
}

// Synced reports whether the Source serves: its informers have synced and Run marked it.
func (s *Source) Synced() bool { return s.synced.Load() }

package registry

import (
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"
)

// Sizes of the watch hub.
const (
	// hubHistory is how many events a hub keeps to replay to a watch that starts at an older
	// resourceVersion; older starts get 410 Gone and relist. A watch resumes from the last
	// version it saw, seconds old; the buffer costs about 1.3 KB per event.
	hubHistory = 2048
	// watcherBuffer is how many events a watcher may fall behind before the hub ends its watch;
	// the client then watches again from its last resourceVersion.
	watcherBuffer = 1024
	// resultBuffer is the buffer of a watch's result channel. The API server flushes the
	// response whenever that channel is empty, so a buffer lets a burst (the initial events)
	// go out in a few large writes instead of one network write per event.
	resultBuffer = 128
)

// hubEvent is a change of one run or plan. old is nil for ADDED, new nil for DELETED. key is
// the resourceVersion the change belongs to: a watch from resourceVersion X replays the event
// when key > X, or key >= X when inclusive (changes caused by an owning object, published at
// the Job version the server had reached, which a list at X may or may not show).
type hubEvent struct {
	key       uint64
	inclusive bool
	typ       watch.EventType
	old, new  runtime.Object
	// sharedOld and sharedNew are old and new as every watcher sends them, encoded once for
	// all (set by publish).
	sharedOld, sharedNew runtime.Object
}

// after reports whether a watch from resourceVersion rv replays the event.
func (e hubEvent) after(rv uint64) bool {
	return e.key > rv || (e.inclusive && e.key == rv)
}

// hub fans the events of one resource out to its watchers and keeps the recent ones for
// replay. Each watcher gets the events its namespace, labels and fields select, as ADDED,
// MODIFIED or DELETED from its point of view: a run that stops matching a field selector is
// DELETED for that watcher.
type hub struct {
	newObject func() runtime.Object
	fieldsOf  func(runtime.Object) fields.Set

	mu       sync.Mutex
	history  []hubEvent // ring buffer
	start    int        // index of the oldest event in history
	count    int
	evicted  bool
	evictedX hubEvent // the evicted event that reaches the newest resourceVersion
	watchers map[*hubWatcher]struct{}
	// published counts publish calls; initial lists computed since the last one still hold.
	published uint64
	// initialMemo shares the initial objects of one selection among the watches that start
	// before the next publish, within initialMemoAge: a herd of watchers that start together
	// costs one computation and one copy of the objects, which nobody mutates.
	initialMemo map[string]initialMemoEntry
	now         func() time.Time
}

// initialMemoAge bounds how old shared initial objects may be, counted from when their
// computation ended; the durations of running Jobs in them are computed at that time.
const initialMemoAge = time.Second

// initialMemoEntry is the initial objects of one selection, computed at publish count and
// ready at time at.
type initialMemoEntry struct {
	published uint64
	at        time.Time
	objects   []runtime.Object
}

func newHub(newObject func() runtime.Object, fieldsOf func(runtime.Object) fields.Set, now func() time.Time) *hub {
	return &hub{
		newObject:   newObject,
		fieldsOf:    fieldsOf,
		history:     make([]hubEvent, hubHistory),
		watchers:    map[*hubWatcher]struct{}{},
		initialMemo: map[string]initialMemoEntry{},
		now:         now,
	}
}

// publish records events and sends them to the watchers that select them.
func (h *hub) publish(events []hubEvent) {
	if len(events) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.published++
	clear(h.initialMemo)
	for _, e := range events {
		e.sharedOld, e.sharedNew = shareEncoding(e.old), shareEncoding(e.new)
		h.record(e)
		for w := range h.watchers {
			if ev, ok := w.translate(e); ok && !w.offer(ev) {
				delete(h.watchers, w)
				close(w.in)
				// The client relists and watches again from where it is; say so, since a watcher
				// that keeps falling behind is worth finding.
				klog.Background().Info("Closed a watch that fell behind", "selection", w.sel.key(), "buffered", cap(w.in))
			}
		}
	}
}

// record appends e to the ring, evicting the oldest event when it is full.
func (h *hub) record(e hubEvent) {
	if h.count == len(h.history) {
		old := h.history[h.start]
		if !h.evicted || old.key > h.evictedX.key || (old.key == h.evictedX.key && old.inclusive) {
			h.evictedX = hubEvent{key: old.key, inclusive: old.inclusive}
		}
		h.evicted = true
		h.history[h.start] = e
		h.start = (h.start + 1) % len(h.history)
		return
	}
	h.history[(h.start+h.count)%len(h.history)] = e
	h.count++
}

// initialObjects returns the current objects of the selection named key, computed by list or
// shared with a watch that started since the last publish.
func (h *hub) initialObjects(key string, list func() []runtime.Object) []runtime.Object {
	now := h.now()
	if e, ok := h.initialMemo[key]; ok && e.published == h.published && now.Sub(e.at) < initialMemoAge {
		return e.objects
	}
	// Entries too old to share are dropped here, so a quiet hub does not keep them.
	for k, e := range h.initialMemo {
		if now.Sub(e.at) >= initialMemoAge {
			delete(h.initialMemo, k)
		}
	}
	objects := list()
	for i, obj := range objects {
		objects[i] = shareEncoding(obj)
	}
	// Aged from when they are ready, not from when the computation started: a computation
	// longer than initialMemoAge (100,000 Jobs) would otherwise leave every watch queued behind
	// it to compute, and hold, a copy of its own.
	h.initialMemo[key] = initialMemoEntry{published: h.published, at: h.now(), objects: objects}
	return objects
}

// watch registers a watcher. initial, when set, computes the current objects of the
// selection, sent as ADDED first (resourceVersion "" or "0", or sendInitialEvents); otherwise
// the events after resourceVersion rv are replayed, or 410 Gone returned when some were
// already evicted. listRV is the resourceVersion of the initial-events-end bookmark.
func (h *hub) watch(sel selection, rv string, initial func() []runtime.Object, listRV func() string, bookmark bool) (*hubWatcher, error) {
	w := &hubWatcher{
		sel:      sel,
		fieldsOf: h.fieldsOf,
		in:       make(chan watch.Event, watcherBuffer),
		out:      make(chan watch.Event, resultBuffer),
		done:     make(chan struct{}),
		hub:      h,
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if initial != nil {
		// The objects are shared with the other watches that start with them, not copied
		// into events per watcher: a herd of watchers holds one slice.
		w.initialAdded = h.initialObjects(sel.key(), initial)
		if bookmark {
			mark := h.newObject()
			m, _ := meta.Accessor(mark)
			m.SetResourceVersion(listRV())
			m.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
			w.initial = append(w.initial, watch.Event{Type: watch.Bookmark, Object: mark})
		}
	} else {
		from, err := strconv.ParseUint(rv, 10, 64)
		if err != nil {
			return nil, apierrors.NewBadRequest("resourceVersion " + strconv.Quote(rv) + " is not a resourceVersion of this server")
		}
		if h.evicted && h.evictedX.after(from) {
			return nil, apierrors.NewResourceExpired("too old resource version: " + rv + "; list again")
		}
		for i := 0; i < h.count; i++ {
			e := h.history[(h.start+i)%len(h.history)]
			if !e.after(from) {
				continue
			}
			if ev, ok := w.translate(e); ok {
				w.initial = append(w.initial, ev)
			}
		}
	}
	h.watchers[w] = struct{}{}
	go w.run()
	return w, nil
}

// remove unregisters w.
func (h *hub) remove(w *hubWatcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.watchers, w)
}

// watcherCount is the number of registered watchers.
func (h *hub) watcherCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.watchers)
}

// hubWatcher is one watch: the events it must send first, then the live ones.
type hubWatcher struct {
	sel      selection
	fieldsOf func(runtime.Object) fields.Set
	hub      *hub

	// initialAdded are sent as ADDED first, then initial: the initial-events-end bookmark, or
	// the events replayed from the history.
	initialAdded []runtime.Object
	initial      []watch.Event
	in           chan watch.Event
	out          chan watch.Event
	done         chan struct{}
	once         sync.Once
}

var _ watch.Interface = &hubWatcher{}

// ResultChan implements watch.Interface.
func (w *hubWatcher) ResultChan() <-chan watch.Event { return w.out }

// Stop implements watch.Interface.
func (w *hubWatcher) Stop() {
	w.once.Do(func() {
		close(w.done)
		w.hub.remove(w)
	})
}

// offer queues ev without blocking; false when the watcher is too far behind.
func (w *hubWatcher) offer(ev watch.Event) bool {
	select {
	case w.in <- ev:
		return true
	default:
		return false
	}
}

// run sends the initial events, then the live ones, until the watch stops or the hub drops
// the watcher.
func (w *hubWatcher) run() {
	defer close(w.out)
	added, initial := w.initialAdded, w.initial
	w.initialAdded, w.initial = nil, nil
	for _, obj := range added {
		select {
		case w.out <- watch.Event{Type: watch.Added, Object: obj}:
		case <-w.done:
			return
		}
	}
	for _, ev := range initial {
		select {
		case w.out <- ev:
		case <-w.done:
			return
		}
	}
	for {
		select {
		case ev, ok := <-w.in:
			if !ok {
				return
			}
			select {
			case w.out <- ev:
			case <-w.done:
				return
			}
		case <-w.done:
			return
		}
	}
}

// translate turns a change into the event this watcher sees, if any: MODIFIED while the object
// stays selected, ADDED when it becomes selected, DELETED (with its last selected state) when
// it stops being selected or goes away.
func (w *hubWatcher) translate(e hubEvent) (watch.Event, bool) {
	oldIn := e.old != nil && w.selects(e.old)
	newIn := e.new != nil && w.selects(e.new)
	switch {
	case oldIn && newIn:
		return watch.Event{Type: watch.Modified, Object: e.sharedNew}, true
	case newIn:
		return watch.Event{Type: watch.Added, Object: e.sharedNew}, true
	case oldIn && e.new == nil:
		return watch.Event{Type: watch.Deleted, Object: e.sharedOld}, true
	case oldIn:
		// The object left the selection: report its last selected state at the new version.
		obj := e.old.DeepCopyObject()
		if m, err := meta.Accessor(obj); err == nil {
			if n, err := meta.Accessor(e.new); err == nil {
				m.SetResourceVersion(n.GetResourceVersion())
			}
		}
		return watch.Event{Type: watch.Deleted, Object: obj}, true
	}
	return watch.Event{}, false
}

// selects reports whether the watcher's selection includes obj.
func (w *hubWatcher) selects(obj runtime.Object) bool {
	m, err := meta.Accessor(obj)
	if err != nil {
		return false
	}
	return w.sel.matches(m, w.fieldsOf(obj))
}

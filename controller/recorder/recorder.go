// Package recorder records the controller's Kubernetes events (events.k8s.io/v1), with the
// series semantics of client-go's recorder and a fraction of its memory.
//
// client-go's events broadcaster keeps a copy of every event it wrote for six to twelve minutes,
// to turn the event's repeats into a series. A converged object costs the controller two such
// copies, more than its cached Cluster. Recorder keeps, per event, only what writing its series
// needs: the event's name and namespace, a count and two times, under a 64-bit key of what makes
// two events the same one.
package recorder

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	eventsclient "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/record/util"
	"k8s.io/client-go/tools/reference"
	"k8s.io/utils/clock"
)

const (
	// SeriesEnd is how long after an event's last occurrence its series ends: a repeat later
	// than that is a new event. client-go's recorder uses the same six minutes.
	SeriesEnd = 6 * time.Minute
	// SeriesRefresh is how often the count of a series that goes on is written. Repeats after
	// the second are counted in memory and written at this pace or when the series ends, so an
	// event repeated each pass costs no write per pass.
	SeriesRefresh = 30 * time.Minute
	// QueueLength bounds the events waiting to be written; an event recorded while it is full
	// is logged and dropped, as events are best effort. It holds a start of every object of a
	// large fleet at once.
	QueueLength = 4096
	// Writers is how many events are written at once. The writes of one event (its creation,
	// then its series) go through one writer, in order.
	Writers = 8
	// sweepEvery is how often ended series are forgotten and due counts written.
	sweepEvery = time.Minute
	// writeTries is how many times a write that failed for a reason other than the event
	// itself (the API server unreachable) is tried.
	writeTries = 3
)

// Recorder is an events.EventRecorder that writes events.k8s.io/v1 Events. Two events are the
// same when their type, action, reason and regarding and related objects are, as client-go's
// recorder decides; the second occurrence within SeriesEnd of the last writes a series of
// count 2 onto the first event, later ones raise the count. It must be started (Start) to write.
type Recorder struct {
	events     eventsclient.EventsGetter
	scheme     *runtime.Scheme
	controller string
	instance   string
	clock      clock.Clock
	log        logr.Logger

	queues []chan write
	seed   maphash.Seed

	mu            sync.Mutex
	series        map[uint64]*series
	lastNameNanos int64
}

// series is what the Recorder remembers of an event written, to count its repeats.
type series struct {
	namespace, name string
	// count is the occurrences seen, written the count that the API server has.
	count, written int32
	// last is the last occurrence, writtenAt when the count was last written (unix nanos).
	last, writtenAt int64
}

// write is one request for the writer: a whole event to create, or a series count to write
// onto an event created before.
type write struct {
	create *eventsv1.Event
	patch  seriesPatch
}

type seriesPatch struct {
	namespace, name string
	count           int32
	last            time.Time
}

var _ events.EventRecorder = (*Recorder)(nil)

// New returns a Recorder writing through events as reportingController, from instance (the
// reporting instance: usually the controller's name and its pod's).
func New(c eventsclient.EventsGetter, scheme *runtime.Scheme, reportingController, instance string, clk clock.Clock, log logr.Logger) *Recorder {
	if clk == nil {
		clk = clock.RealClock{}
	}
	queues := make([]chan write, Writers)
	for i := range queues {
		queues[i] = make(chan write, QueueLength/Writers)
	}
	return &Recorder{
		events: c, scheme: scheme, controller: reportingController, instance: instance, clock: clk, log: log,
		queues: queues, seed: maphash.MakeSeed(), series: map[uint64]*series{},
	}
}

// Eventf records an event regarding an object, related to another when related is not nil.
// It never blocks on the API server.
func (r *Recorder) Eventf(regarding, related runtime.Object, eventType, reason, action, note string, args ...any) {
	message := note
	if len(args) > 0 {
		message = fmt.Sprintf(note, args...)
	}
	if eventType != corev1.EventTypeNormal && eventType != corev1.EventTypeWarning {
		r.log.Error(nil, "Event of an unknown type not recorded", "type", eventType, "reason", reason, "note", message)
		return
	}
	regardingRef, err := reference.GetReference(r.scheme, regarding)
	if err != nil {
		r.log.Error(err, "Event not recorded: no reference to its object", "type", eventType, "reason", reason, "note", message)
		return
	}
	var relatedRef *corev1.ObjectReference
	if related != nil {
		if relatedRef, err = reference.GetReference(r.scheme, related); err != nil {
			r.log.V(4).Info("Event recorded without its related object", "reason", reason, "error", err)
		}
	}
	if log := r.log.V(1); log.Enabled() {
		log.Info("Event", "object", klogRef(regardingRef), "type", eventType, "reason", reason, "note", message)
	}
	now := r.clock.Now()
	key := r.key(eventType, action, reason, regardingRef, relatedRef)

	r.mu.Lock()
	s, ok := r.series[key]
	if ok && now.UnixNano()-s.last < int64(SeriesEnd) {
		s.count++
		s.last = now.UnixNano()
		due := s.count == 2
		if due {
			s.written, s.writtenAt = s.count, s.last
		}
		p := seriesPatch{namespace: s.namespace, name: s.name, count: s.count, last: now}
		r.mu.Unlock()
		if due {
			r.enqueue(key, write{patch: p})
		}
		return
	}
	var final *seriesPatch
	if ok && s.count > s.written {
		// The series ended unswept: its final count goes before the new event.
		final = &seriesPatch{namespace: s.namespace, name: s.name, count: s.count, last: time.Unix(0, s.last)}
	}
	// Names are the object's and a time in nanoseconds, made unique among this Recorder's
	// events: two events of one object in the same nanosecond would otherwise share a name.
	nameNanos := now.UnixNano()
	if nameNanos <= r.lastNameNanos {
		nameNanos = r.lastNameNanos + 1
	}
	r.lastNameNanos = nameNanos
	event := r.makeEvent(regardingRef, relatedRef, now, nameNanos, eventType, reason, action, message)
	r.series[key] = &series{namespace: event.Namespace, name: event.Name, count: 1, written: 1, last: now.UnixNano(), writtenAt: now.UnixNano()}
	r.mu.Unlock()
	if final != nil {
		r.enqueue(key, write{patch: *final})
	}
	r.enqueue(key, write{create: event})
}

func klogRef(ref *corev1.ObjectReference) string {
	if ref.Namespace == "" {
		return ref.Kind + "/" + ref.Name
	}
	return ref.Kind + "/" + ref.Namespace + "/" + ref.Name
}

// key is the hash of what makes two events the same event.
func (r *Recorder) key(eventType, action, reason string, regarding, related *corev1.ObjectReference) uint64 {
	var h maphash.Hash
	h.SetSeed(r.seed)
	for _, s := range []string{eventType, action, reason} {
		h.WriteString(s)
		h.WriteByte(0)
	}
	writeRef(&h, regarding)
	if related != nil {
		writeRef(&h, related)
	}
	return h.Sum64()
}

func writeRef(h *maphash.Hash, ref *corev1.ObjectReference) {
	for _, s := range []string{ref.APIVersion, ref.Kind, ref.Namespace, ref.Name, string(ref.UID), ref.FieldPath} {
		h.WriteString(s)
		h.WriteByte(0)
	}
}

func (r *Recorder) makeEvent(regarding, related *corev1.ObjectReference, now time.Time, nameNanos int64, eventType, reason, action, note string) *eventsv1.Event {
	namespace := regarding.Namespace
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	return &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: util.GenerateEventName(regarding.Name, nameNanos), Namespace: namespace},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: r.controller,
		ReportingInstance:   r.instance,
		Action:              action,
		Reason:              reason,
		Regarding:           *regarding,
		Related:             related,
		Note:                note,
		Type:                eventType,
	}
}

func (r *Recorder) enqueue(key uint64, w write) {
	select {
	case r.queues[key%Writers] <- w:
	default:
		r.log.Error(nil, "Event dropped: too many events wait to be written", "queued", QueueLength)
	}
}

// Start writes the recorded events until ctx ends, then writes those still queued within a
// few seconds.
func (r *Recorder) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, q := range r.queues {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.writeFrom(ctx, q)
		}()
	}
	sweep := r.clock.Tick(sweepEvery)
	for {
		select {
		case <-sweep:
			for _, d := range r.sweep(r.clock.Now()) {
				r.enqueue(d.key, write{patch: d.patch})
			}
		case <-ctx.Done():
			wg.Wait()
			return nil
		}
	}
}

// writeFrom writes what q brings until ctx ends, then what q still holds within a few seconds.
func (r *Recorder) writeFrom(ctx context.Context, q chan write) {
	for {
		select {
		case w := <-q:
			r.write(ctx, w)
		case <-ctx.Done():
			drain, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for {
				select {
				case w := <-q:
					r.write(drain, w)
				default:
					return
				}
			}
		}
	}
}

// NeedLeaderElection is false: writing events conflicts with no other replica, and whatever
// records them has been elected already.
func (r *Recorder) NeedLeaderElection() bool { return false }

// due is a series count to write, with its series' key.
type due struct {
	key   uint64
	patch seriesPatch
}

// sweep forgets the series that ended before now and returns the counts to write: the final
// count of an ended series whose count was not written, and the count of a series that goes on
// and was last written SeriesRefresh ago.
func (r *Recorder) sweep(now time.Time) []due {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []due
	for key, s := range r.series {
		ended := now.UnixNano()-s.last >= int64(SeriesEnd)
		if s.count > s.written && (ended || now.UnixNano()-s.writtenAt >= int64(SeriesRefresh)) {
			out = append(out, due{key: key, patch: seriesPatch{namespace: s.namespace, name: s.name, count: s.count, last: time.Unix(0, s.last)}})
			s.written, s.writtenAt = s.count, now.UnixNano()
		}
		if ended {
			delete(r.series, key)
		}
	}
	return out
}

// write performs one write, trying again a few times while the API server cannot be reached.
// A series whose event is gone is forgotten, so its next occurrence is a new event.
func (r *Recorder) write(ctx context.Context, w write) {
	for try := 1; ; try++ {
		err := r.writeOnce(ctx, w)
		switch {
		case err == nil:
			return
		case w.create == nil && apierrors.IsNotFound(err):
			r.forget(w.patch.namespace, w.patch.name)
			return
		case apierrors.IsAlreadyExists(err):
			return
		case errorOfTheEvent(err) || try >= writeTries || ctx.Err() != nil:
			r.log.Error(err, "Event not written")
			return
		}
		select {
		case <-ctx.Done():
		case <-r.clock.After(time.Duration(try) * time.Second):
		}
	}
}

func (r *Recorder) writeOnce(ctx context.Context, w write) error {
	if w.create != nil {
		_, err := r.events.Events(w.create.Namespace).Create(ctx, w.create, metav1.CreateOptions{})
		return err
	}
	patch, err := json.Marshal(map[string]any{"series": eventsv1.EventSeries{Count: w.patch.count, LastObservedTime: metav1.NewMicroTime(w.patch.last)}})
	if err != nil {
		return err
	}
	_, err = r.events.Events(w.patch.namespace).Patch(ctx, w.patch.name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// errorOfTheEvent reports whether err is the API server refusing the event itself, which no
// retry changes.
func errorOfTheEvent(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err) || apierrors.IsNotFound(err)
}

func (r *Recorder) forget(namespace, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, s := range r.series {
		if s.namespace == namespace && s.name == name {
			delete(r.series, key)
			return
		}
	}
}

// Remembered is how many events the Recorder keeps counting repeats of.
func (r *Recorder) Remembered() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.series)
}

package recorder

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

// writes is what the recorder asked the API server, in order: "create <name>" or
// "patch <name> <count>".
type writes []string

func newTestRecorder(t *testing.T) (*Recorder, *fake.Clientset, *clocktesting.FakeClock, *writes) {
	t.Helper()
	clientset := fake.NewClientset()
	seen := &writes{}
	clientset.PrependReactor("*", "events", func(a clienttesting.Action) (bool, runtime.Object, error) {
		switch a := a.(type) {
		case clienttesting.CreateAction:
			*seen = append(*seen, "create "+a.GetObject().(*eventsv1.Event).Name)
		case clienttesting.PatchAction:
			var p struct{ Series eventsv1.EventSeries }
			if err := json.Unmarshal(a.GetPatch(), &p); err != nil {
				t.Fatalf("patch %s: %v", a.GetPatch(), err)
			}
			*seen = append(*seen, "patch "+a.GetName()+" "+strconv.Itoa(int(p.Series.Count)))
		}
		return false, nil, nil
	})
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	return New(clientset.EventsV1(), scheme(), "captf-controller", "captf-controller-host", clk, logr.Discard()), clientset, clk, seen
}

func scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = corev1.AddToScheme(s)
	return s
}

func object(name string) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)}}
	cm.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"})
	return cm
}

// flush writes what is queued, as Start would.
func flush(r *Recorder) {
	for _, q := range r.queues {
	drain:
		for {
			select {
			case w := <-q:
				r.write(context.Background(), w)
			default:
				break drain
			}
		}
	}
}

// sweep writes what a sweep at the clock's time finds due.
func sweep(r *Recorder, clk *clocktesting.FakeClock) {
	for _, d := range r.sweep(clk.Now()) {
		r.write(context.Background(), write{patch: d.patch})
	}
}

func eventName(t *testing.T, c *fake.Clientset) string {
	t.Helper()
	list, err := c.EventsV1().Events("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil || len(list.Items) == 0 {
		t.Fatalf("no event: %v", err)
	}
	return list.Items[0].Name
}

func TestSeries(t *testing.T) {
	a := object("a")
	for _, tc := range []struct {
		name string
		// steps: "a" records the event on object a, "b" on object b, "other" another reason on
		// a, "+1m" advances the clock, "sweep" runs a sweep.
		steps []string
		want  []string // with "E" for the first event's name
	}{
		{"the first occurrence creates the event", []string{"a"}, []string{"create E"}},
		{"a repeat within the series' end writes a series of count 2 onto the event", []string{"a", "+5m", "a"}, []string{"create E", "patch E 2"}},
		{"later repeats are counted without a write", []string{"a", "a", "a", "a"}, []string{"create E", "patch E 2"}},
		{"a series that goes on has its count written every refresh", []string{"a", "a", "a", "+5m", "a", "+5m", "a", "+5m", "a", "+5m", "a", "+5m", "a", "+5m", "a", "+1m", "sweep"},
			[]string{"create E", "patch E 2", "patch E 9"}},
		{"a series that ended has its final count written and is forgotten", []string{"a", "a", "a", "+6m", "sweep"}, []string{"create E", "patch E 2", "patch E 3"}},
		{"an ended series whose count was written costs no write", []string{"a", "a", "+6m", "sweep"}, []string{"create E", "patch E 2"}},
		{"a repeat after the series' end is a new event, after the old series' final count", []string{"a", "a", "a", "+6m", "a"}, []string{"create E", "patch E 2", "patch E 3", "create new"}},
		{"other objects' events are other events", []string{"a", "b"}, []string{"create E", "create b"}},
		{"another reason is another event", []string{"a", "other"}, []string{"create E", "create other"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, c, clk, seen := newTestRecorder(t)
			first := ""
			for _, step := range tc.steps {
				switch step {
				case "a":
					r.Eventf(a, nil, corev1.EventTypeNormal, "Applied", "Applied", "applied %d", 1)
				case "b":
					r.Eventf(object("b"), nil, corev1.EventTypeNormal, "Applied", "Applied", "applied")
				case "other":
					r.Eventf(a, nil, corev1.EventTypeWarning, "Failed", "Failed", "failed")
				case "sweep":
					sweep(r, clk)
				default:
					d, err := time.ParseDuration(step[1:])
					if err != nil {
						t.Fatal(err)
					}
					clk.Step(d)
				}
				flush(r)
				if first == "" {
					first = eventName(t, c)
				}
			}
			var want []string
			for _, w := range tc.want {
				switch w {
				case "create E":
					w = "create " + first
				case "patch E 2", "patch E 3", "patch E 9":
					w = "patch " + first + w[len("patch E"):]
				}
				want = append(want, w)
			}
			got := *seen
			if len(got) != len(want) {
				t.Fatalf("writes %q, want %q", got, want)
			}
			for i := range want {
				if want[i] == "create new" || want[i] == "create b" || want[i] == "create other" {
					if got[i][:len("create ")] != "create " || got[i] == "create "+first {
						t.Errorf("write %d: %q, want a new event", i, got[i])
					}
					continue
				}
				if got[i] != want[i] {
					t.Errorf("write %d: %q, want %q", i, got[i], want[i])
				}
			}
		})
	}
}

func TestTheEventAsWritten(t *testing.T) {
	r, c, _, _ := newTestRecorder(t)
	job := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "run", Namespace: "ns", UID: "run-uid"}}
	job.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	r.Eventf(object("a"), job, corev1.EventTypeWarning, "Failed", "Apply", "the %s failed", "apply")
	flush(r)
	list, err := c.EventsV1().Events("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("events %v: %v", list, err)
	}
	e := list.Items[0]
	for _, check := range []struct{ what, got, want string }{
		{"type", e.Type, corev1.EventTypeWarning},
		{"reason", e.Reason, "Failed"},
		{"action", e.Action, "Apply"},
		{"note", e.Note, "the apply failed"},
		{"regarding", e.Regarding.Kind + "/" + e.Regarding.Name, "ConfigMap/a"},
		{"related", e.Related.Kind + "/" + e.Related.Name, "Pod/run"},
		{"reporting controller", e.ReportingController, "captf-controller"},
		{"reporting instance", e.ReportingInstance, "captf-controller-host"},
	} {
		if check.got != check.want {
			t.Errorf("%s: %q, want %q", check.what, check.got, check.want)
		}
	}
	if e.EventTime.IsZero() || e.Series != nil {
		t.Errorf("event time %v, series %v: want a time and no series", e.EventTime, e.Series)
	}
}

func TestWhatIsNotRecorded(t *testing.T) {
	for _, tc := range []struct {
		name   string
		record func(r *Recorder)
	}{
		{"an event of an unknown type", func(r *Recorder) {
			r.Eventf(object("a"), nil, "Odd", "Reason", "Action", "note")
		}},
		{"an event on an object of a kind outside the scheme", func(r *Recorder) {
			r.Eventf(&eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: "ns"}}, nil, corev1.EventTypeNormal, "Reason", "Action", "note")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _, _, seen := newTestRecorder(t)
			tc.record(r)
			flush(r)
			if len(*seen) != 0 || r.Remembered() != 0 {
				t.Errorf("writes %q, %d remembered; want none", *seen, r.Remembered())
			}
		})
	}
}

func TestASeriesWhoseEventIsGoneIsForgotten(t *testing.T) {
	r, c, _, _ := newTestRecorder(t)
	a := object("a")
	r.Eventf(a, nil, corev1.EventTypeNormal, "Applied", "Applied", "applied")
	flush(r)
	if err := c.EventsV1().Events("ns").Delete(context.Background(), eventName(t, c), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r.Eventf(a, nil, corev1.EventTypeNormal, "Applied", "Applied", "applied")
	flush(r)
	if r.Remembered() != 0 {
		t.Fatalf("%d series remembered, want the gone one forgotten", r.Remembered())
	}
	r.Eventf(a, nil, corev1.EventTypeNormal, "Applied", "Applied", "applied")
	flush(r)
	if list, _ := c.EventsV1().Events("ns").List(context.Background(), metav1.ListOptions{}); len(list.Items) != 1 {
		t.Errorf("%d events, want the next occurrence written as a new one", len(list.Items))
	}
}

func TestAFullQueueDropsEventsWithoutBlocking(t *testing.T) {
	r, _, _, _ := newTestRecorder(t)
	// Twice what the queues hold, over keys that spread across them: each fills.
	for i := 0; i < 2*QueueLength; i++ {
		r.Eventf(object("o"+strconv.Itoa(i)), nil, corev1.EventTypeNormal, "Applied", "Applied", "applied")
	}
	queued := 0
	for _, q := range r.queues {
		queued += len(q)
	}
	if queued != QueueLength {
		t.Errorf("%d queued, want %d and the rest dropped", queued, QueueLength)
	}
}

func TestWritesThatFailForTheEventAreNotTriedAgain(t *testing.T) {
	r, c, _, _ := newTestRecorder(t)
	tries := 0
	c.PrependReactor("create", "events", func(clienttesting.Action) (bool, runtime.Object, error) {
		tries++
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "events.k8s.io", Resource: "events"}, "e", nil)
	})
	r.Eventf(object("a"), nil, corev1.EventTypeNormal, "Applied", "Applied", "applied")
	flush(r)
	if tries != 1 {
		t.Errorf("%d tries, want 1", tries)
	}
}

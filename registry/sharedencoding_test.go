package registry

import (
	"bytes"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/captf/captf/apis/runs"
)

// unshared returns the object a sharedEncoding wraps, or obj itself: what a watcher's event
// carries.
func unshared(obj runtime.Object) runtime.Object {
	if s, ok := obj.(*sharedEncoding); ok {
		return s.object
	}
	return obj
}

// countingEncoder encodes a run as its name and kind, counting the calls; like the API
// server's encoders, it sets the kind of the object it is given.
type countingEncoder struct {
	mu    sync.Mutex
	calls int
	err   error
}

func (c *countingEncoder) encode(obj runtime.Object, w io.Writer) error {
	c.mu.Lock()
	c.calls++
	c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	obj.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{Group: "runs.captf.io", Version: "v1alpha1", Kind: "Run"})
	_, err := io.WriteString(w, obj.(*runs.Run).Name+"/"+obj.GetObjectKind().GroupVersionKind().Kind)
	return err
}

func TestASharedEncoding(t *testing.T) {
	tests := []struct {
		name string
		// ids are the identifiers of successive CacheEncode calls.
		ids       []runtime.Identifier
		encodeErr error
		wantCalls int
		wantBytes string
	}{
		{name: "the watches of one serialization write the bytes of the first", ids: []runtime.Identifier{"json", "json", "json"}, wantCalls: 1, wantBytes: "web-1/Run"},
		{name: "each serialization is encoded once", ids: []runtime.Identifier{"json", "table", "json", "table"}, wantCalls: 2, wantBytes: "web-1/Run"},
		{name: "an encoding that fails fails for every watch of it", ids: []runtime.Identifier{"json", "json"}, encodeErr: errors.New("no kind"), wantCalls: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := &runs.Run{ObjectMeta: metav1.ObjectMeta{Name: "web-1"}}
			shared := shareEncoding(run).(runtime.CacheableObject)
			enc := &countingEncoder{err: tt.encodeErr}
			for _, id := range tt.ids {
				var buf bytes.Buffer
				err := shared.CacheEncode(id, enc.encode, &buf)
				if !errors.Is(err, tt.encodeErr) {
					t.Fatalf("CacheEncode(%s) = %v, want %v", id, err, tt.encodeErr)
				}
				if err == nil && buf.String() != tt.wantBytes {
					t.Fatalf("CacheEncode(%s) wrote %q, want %q", id, buf.String(), tt.wantBytes)
				}
			}
			if enc.calls != tt.wantCalls {
				t.Fatalf("encoded %d times, want %d", enc.calls, tt.wantCalls)
			}
			if !run.GetObjectKind().GroupVersionKind().Empty() {
				t.Fatalf("the encoder set the kind of the shared run to %v: it must encode a copy", run.GetObjectKind().GroupVersionKind())
			}
			if got := shared.GetObject(); got == runtime.Object(run) || got.(*runs.Run).Name != run.Name {
				t.Fatalf("GetObject = %p %+v, want a copy of %p", got, got, run)
			}
		})
	}
}

// TestWatchesEncodingTogetherEncodeOnce: watches that encode the same event at the same time
// wait for one encoding.
func TestWatchesEncodingTogetherEncodeOnce(t *testing.T) {
	shared := shareEncoding(&runs.Run{ObjectMeta: metav1.ObjectMeta{Name: "web-1"}}).(runtime.CacheableObject)
	enc := &countingEncoder{}
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			var buf bytes.Buffer
			if err := shared.CacheEncode("json", enc.encode, &buf); err != nil || buf.String() != "web-1/Run" {
				t.Errorf("CacheEncode = %q, %v", buf.String(), err)
			}
		})
	}
	wg.Wait()
	if enc.calls != 1 {
		t.Fatalf("50 watches encoded %d times, want 1", enc.calls)
	}
}

// TestEveryWatcherSendsTheSameSharedObject: the hub hands every watcher of an event, and every
// watch that starts with the same initial objects, one shared object to encode.
func TestEveryWatcherSendsTheSameSharedObject(t *testing.T) {
	h := newHub(func() runtime.Object { return &runs.Run{} }, runFieldSet, func() time.Time { return time.Unix(100, 0) })
	list := func() []runtime.Object {
		return []runtime.Object{&runs.Run{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns"}}}
	}
	var watchers []*hubWatcher
	for range 2 {
		w, err := h.watch(selection{namespace: "ns"}, "", list, func() string { return "1" }, false)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		watchers = append(watchers, w)
	}
	h.publish([]hubEvent{{key: 2, typ: watch.Added, new: &runs.Run{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns"}}}})
	var got [2][]runtime.Object
	for i, w := range watchers {
		for range 2 {
			select {
			case ev := <-w.ResultChan():
				if _, ok := ev.Object.(runtime.CacheableObject); !ok {
					t.Fatalf("watcher %d got a %T, want an object that shares its encoding", i, ev.Object)
				}
				got[i] = append(got[i], ev.Object)
			case <-time.After(5 * time.Second):
				t.Fatalf("watcher %d: no event within 5s", i)
			}
		}
	}
	for j := range got[0] {
		if got[0][j] != got[1][j] {
			t.Fatalf("event %d: the watchers got different objects %p and %p, want one shared", j, got[0][j], got[1][j])
		}
	}
}

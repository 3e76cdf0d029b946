package capi

import (
	"context"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/captf/captf/controller"
	"github.com/captf/captf/test/system"
)

// history keeps every version of the namespace's objects of some kinds that a watch delivered,
// deleted ones included. What lasts only a moment is still there to check afterwards: the
// conditions of a Machine that Cluster API deletes, or a destroy Job, which the garbage
// collector takes with the TerraformMachine it destroyed.
type history struct {
	s  *system.Suite
	wc client.WithWatch
	mu sync.Mutex
	// versions are the versions seen of each object, oldest first, by kind and name.
	versions map[string]map[string][]client.Object
}

// watchHistory starts recording the suite namespace's objects of each kind (a kind's name and
// its list type) until the test ends.
func watchHistory(t *testing.T, s *system.Suite, kinds map[string]client.ObjectList) *history {
	t.Helper()
	wc, err := client.NewWithWatch(s.Sys.Env.Config, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &history{s: s, wc: wc, versions: map[string]map[string][]client.Object{}}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	// Every kind's map exists before any watch records into the maps' map.
	for kind := range kinds {
		h.versions[kind] = map[string][]client.Object{}
	}
	for kind, list := range kinds {
		// The first watch starts here, so that nothing done after watchHistory returns is missed.
		w, err := wc.Watch(ctx, list, client.InNamespace(s.NS))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.follow(ctx, kind, list, w)
		}()
	}
	return h
}

// follow records a watch's events until ctx ends; a watch the server closes is resumed where
// it stopped.
func (h *history) follow(ctx context.Context, kind string, list client.ObjectList, w watch.Interface) {
	resourceVersion := ""
	for {
		for event := range w.ResultChan() {
			if event.Type == watch.Error {
				// Too old to resume: start again from now.
				if err := apierrors.FromObject(event.Object); apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					resourceVersion = ""
				}
				continue
			}
			if obj, ok := event.Object.(client.Object); ok {
				resourceVersion = obj.GetResourceVersion()
				h.record(kind, obj, event.Type == watch.Deleted)
			}
		}
		w.Stop()
		for {
			if ctx.Err() != nil {
				return
			}
			var err error
			w, err = h.wc.Watch(ctx, list, client.InNamespace(h.s.NS), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: resourceVersion}})
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// deletedAnnotation marks the version a watch delivered as deleted.
const deletedAnnotation = "test.captf.io/deleted"

func (h *history) record(kind string, obj client.Object, deleted bool) {
	if deleted {
		annotations := obj.GetAnnotations()
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[deletedAnnotation] = "true"
		obj.SetAnnotations(annotations)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.versions[kind][obj.GetName()] = append(h.versions[kind][obj.GetName()], obj)
}

// find returns the first version seen of an object of the kind for which match holds.
func find[T client.Object](h *history, kind string, match func(T) bool) (T, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, versions := range h.versions[kind] {
		for _, v := range versions {
			if obj, ok := v.(T); ok && match(obj) {
				return obj, true
			}
		}
	}
	var none T
	return none, false
}

// seen returns every version seen of the objects of the kind.
func seen[T client.Object](h *history, kind string) []T {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []T
	for _, versions := range h.versions[kind] {
		for _, v := range versions {
			if obj, ok := v.(T); ok {
				out = append(out, obj)
			}
		}
	}
	return out
}

// waitSeen waits until a version of an object of the kind for which match holds was seen, and
// returns it.
func waitSeen[T client.Object](t *testing.T, h *history, what, kind string, timeout time.Duration, match func(T) bool) T {
	t.Helper()
	var found T
	h.s.Eventually(what, timeout, func(context.Context) (bool, error) {
		var ok bool
		found, ok = find(h, kind, match)
		return ok, nil
	})
	return found
}

// wasDeleted reports whether the watch saw the object of the kind deleted.
func (h *history) wasDeleted(kind, name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	versions := h.versions[kind][name]
	return len(versions) > 0 && versions[len(versions)-1].GetAnnotations()[deletedAnnotation] == "true"
}

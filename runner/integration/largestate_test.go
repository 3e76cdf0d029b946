package integration

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/captf/captf/jobs"
)

// provideParts stands in for the controller: it creates the state parts a run asks for on the
// lock Lease, in both slots, until the test ends.
func (h *harness) provideParts() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	h.t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		_ = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			lease, err := h.client.CoordinationV1().Leases(h.ns).Get(ctx, h.lockLeaseName(), metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			n, _ := strconv.Atoi(lease.Annotations[jobs.AnnotationStatePartsWanted])
			for _, slot := range jobs.StatePartSlots {
				for i := range min(n, jobs.MaxStateParts) {
					part := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: jobs.StatePartName(h.suffix, slot, i), Namespace: h.ns}}
					if _, err := h.client.CoreV1().Secrets(h.ns).Create(ctx, part, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
						h.t.Errorf("creating a state part: %v", err)
					}
				}
			}
			return false, nil
		})
	}()
}

// joinedState reads the state as the controller does, joining its parts, and reports the
// manifest the head holds, if any.
func (h *harness) joinedState() (tfstate, *jobs.StateParts) {
	h.t.Helper()
	head := h.stateSecret().Data["tfstate"]
	manifest, ok := jobs.StatePartsOf(head)
	if !ok {
		s, _ := h.state()
		return s, nil
	}
	var joined []byte
	for i := range manifest.Count {
		part, err := h.client.CoreV1().Secrets(h.ns).Get(context.Background(), jobs.StatePartName(h.suffix, manifest.Slot, i), metav1.GetOptions{})
		if err != nil {
			h.t.Fatal(err)
		}
		if len(part.Data["tfstate"]) > jobs.MaxStatePartBytes {
			h.t.Errorf("part %d holds %d bytes, more than %d", i, len(part.Data["tfstate"]), jobs.MaxStatePartBytes)
		}
		joined = append(joined, part.Data["tfstate"]...)
	}
	if err := manifest.Check(joined); err != nil {
		h.t.Fatal(err)
	}
	var s tfstate
	if err := json.Unmarshal(gunzip(h.t, joined), &s); err != nil {
		h.t.Fatal(err)
	}
	return s, &manifest
}

func TestAStateAboveTheSecretLimitRoundTrips(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "large")
	h.provideParts()

	first := h.run(jobs.OpApply, vars("blobs", 140), nil).mustSucceed(t)
	if first.Changes == nil || *first.Changes != (jobs.Changes{Add: 140}) {
		t.Errorf("changes %+v, want 140 added", first.Changes)
	}
	state, manifest := h.joinedState()
	if manifest == nil || manifest.Count < 2 || state.instances() != 140 {
		t.Fatalf("manifest %+v and %d instances, want a state of 140 in two parts or more", manifest, state.instances())
	}

	again := h.run(jobs.OpApply, vars("blobs", 140), nil).mustSucceed(t)
	if again.Changes == nil || *again.Changes != (jobs.Changes{}) {
		t.Errorf("second apply changes %+v, want none", again.Changes)
	}
	h.run(jobs.OpRefresh, vars("blobs", 140), nil).mustSucceed(t)
	if clean := h.run(jobs.OpDrift, vars("blobs", 140), nil).mustSucceed(t); clean.Drift == nil || clean.Drift.Detected {
		t.Errorf("drift %+v on an untouched large state", clean.Drift)
	}

	// A change writes the other slot, so the parts the head named stay whole until the head moves.
	grown := h.run(jobs.OpApply, vars("blobs", 150), nil).mustSucceed(t)
	if grown.Changes == nil || *grown.Changes != (jobs.Changes{Add: 10}) {
		t.Errorf("changes %+v, want 10 added", grown.Changes)
	}
	state, next := h.joinedState()
	if next == nil || next.Slot == manifest.Slot || state.instances() != 150 {
		t.Fatalf("after growing: manifest %+v (before %+v), %d instances", next, manifest, state.instances())
	}

	h.run(jobs.OpDestroy, vars("blobs", 150), nil).mustSucceed(t)
	if state, manifest := h.joinedState(); manifest != nil || state.instances() != 0 {
		t.Errorf("after destroy: manifest %+v, %d instances; want an empty state inline", manifest, state.instances())
	}
}

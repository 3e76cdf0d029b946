package workspace

import (
	"errors"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/jobs"
)

// stateMemo remembers, per state Secret, what the last live read of it found: the state as
// read and the Secret's resourceVersion. It keeps no outputs, so no state data stays in memory;
// no lineage, which only a backup reads and a remembered state is backed up already; and no
// inputs hash, which is the Secret's inputs-hash annotation, held by the metadata cache for the
// same resourceVersion. While the cached metadata of the Secret shows the same resourceVersion the
// Secret has not changed, and a pass takes the state from here instead of reading the Secret.
// An entry is stored only after the pass that read the Secret backed the state up, so a
// remembered state never needs its data again.
type stateMemo struct {
	mu      sync.Mutex
	entries map[types.NamespacedName]stateMemoEntry
}

// stateMemoEntry is one remembered read.
type stateMemoEntry struct {
	resourceVersion string
	state           state.State
	err             error
	// hashed is whether the state's inputs hash, not kept, was set.
	hashed bool
}

func newStateMemo() *stateMemo {
	return &stateMemo{entries: map[types.NamespacedName]stateMemoEntry{}}
}

// remember stores what a live read of the Secret at resourceVersion found.
func (m *stateMemo) remember(key types.NamespacedName, resourceVersion string, st state.State, err error) {
	// A state that awaits its key is read anew each pass, so a key added later is used: the
	// key Secret brings no event. So is one whose parts do not make it: the memo is keyed by the
	// head alone, and a part may come back without it changing.
	if m == nil || resourceVersion == "" || errors.Is(err, state.ErrEncrypted) || errors.Is(err, state.ErrStateKey) || errors.Is(err, jobs.ErrStateParts) {
		return
	}
	hashed := st.InputsHash != ""
	st.Outputs, st.Lineage, st.InputsHash = nil, "", ""
	m.mu.Lock()
	defer m.mu.Unlock()
	m.entries[key] = stateMemoEntry{resourceVersion: resourceVersion, state: st, err: err, hashed: hashed}
}

// forget drops the entry of a Secret, e.g. once its object is gone.
func (m *stateMemo) forget(key types.NamespacedName) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.entries, key)
}

// lookup returns the remembered state of the Secret whose metadata cached holds, when its
// resourceVersion is the remembered one; the state's inputs hash is then the cached annotation.
func (m *stateMemo) lookup(key types.NamespacedName, cached metav1.Object) (stateMemoEntry, bool) {
	if m == nil {
		return stateMemoEntry{}, false
	}
	m.mu.Lock()
	e, ok := m.entries[key]
	m.mu.Unlock()
	if !ok || e.resourceVersion != cached.GetResourceVersion() {
		return stateMemoEntry{}, false
	}
	if e.hashed {
		e.state.InputsHash = cached.GetAnnotations()[state.InputsHashAnnotation]
	}
	return e, true
}

package workspace

import (
	"encoding/json"
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/captf/captf/controller/state"
)

func TestStateMemo(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "tfstate-default-x"}
	read := state.State{Exists: true, Serial: 3, InputsHash: "h1:abc", Lineage: "l", Outputs: map[string]json.RawMessage{"kubeconfig": json.RawMessage(`"secret"`)}}
	// The cached metadata of the state Secret at a resourceVersion.
	cached := func(version string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{ResourceVersion: version, Annotations: map[string]string{state.InputsHashAnnotation: read.InputsHash}}}
	}
	tests := []struct {
		name    string
		steps   func(m *stateMemo)
		version string
		want    bool
	}{
		{"a read is remembered under its resourceVersion", func(m *stateMemo) { m.remember(key, "7", read, nil) }, "7", true},
		{"another resourceVersion is a changed Secret", func(m *stateMemo) { m.remember(key, "7", read, nil) }, "8", false},
		{"a read without a resourceVersion is not remembered", func(m *stateMemo) { m.remember(key, "", read, nil) }, "", false},
		{"a forgotten Secret is read again", func(m *stateMemo) { m.remember(key, "7", read, nil); m.forget(key) }, "7", false},
		{"an unreadable state is remembered with its error", func(m *stateMemo) { m.remember(key, "7", state.State{}, state.ErrCorrupt) }, "7", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newStateMemo()
			tt.steps(m)
			e, ok := m.lookup(key, cached(tt.version))
			if ok != tt.want {
				t.Fatalf("lookup = %v, want %v", ok, tt.want)
			}
			if ok && e.state.Outputs != nil {
				t.Errorf("the memo keeps the state's outputs: %v", e.state.Outputs)
			}
			if ok && e.err == nil && (e.state.InputsHash != read.InputsHash || e.state.Serial != read.Serial || !e.state.Exists) {
				t.Errorf("the remembered state is %+v, want the inputs hash of the cached annotation and the serial read", e.state)
			}
			if ok && e.err != nil && !errors.Is(e.err, state.ErrCorrupt) {
				t.Errorf("error %v", e.err)
			}
		})
	}
	var none *stateMemo
	none.remember(key, "7", read, nil)
	none.forget(key)
	if _, ok := none.lookup(key, cached("7")); ok {
		t.Error("a Reconciler without a memo remembered a read")
	}
}

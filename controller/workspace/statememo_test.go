package workspace

import (
	"encoding/json"
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/captf/captf/controller/state"
)

func TestStateMemo(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "tfstate-default-x"}
	read := state.State{Exists: true, Serial: 3, Outputs: map[string]json.RawMessage{"kubeconfig": json.RawMessage(`"secret"`)}}
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
			e, ok := m.lookup(key, tt.version)
			if ok != tt.want {
				t.Fatalf("lookup = %v, want %v", ok, tt.want)
			}
			if ok && e.state.Outputs != nil {
				t.Errorf("the memo keeps the state's outputs: %v", e.state.Outputs)
			}
			if ok && e.err != nil && !errors.Is(e.err, state.ErrCorrupt) {
				t.Errorf("error %v", e.err)
			}
		})
	}
	var none *stateMemo
	none.remember(key, "7", read, nil)
	none.forget(key)
	if _, ok := none.lookup(key, "7"); ok {
		t.Error("a Reconciler without a memo remembered a read")
	}
}

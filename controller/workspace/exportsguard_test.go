package workspace

import (
	"encoding/json"
	"testing"

	"github.com/captf/captf/jobs"
)

func TestExportsGuardOf(t *testing.T) {
	pending := func(hash, inputs string) string {
		b, _ := json.Marshal(pendingExports{Hash: hash, InputsHash: inputs, Job: "j"})
		return string(b)
	}
	for _, tc := range []struct {
		rule          string
		annotations   map[string]string
		appliedBefore bool
		current       string
		approval      string
		want          ExportsGuard
	}{
		{"a pool that never applied renders its exports unguarded", nil, false, "e1:a", "", ExportsSettled},
		{"the exports applied last render unguarded", map[string]string{AnnotationAppliedClusterOutputsHash: "e1:a"}, true, "e1:a", "", ExportsSettled},
		{"changed exports not tried yet are guarded", map[string]string{AnnotationAppliedClusterOutputsHash: "e1:a"}, true, "e1:b", "", ExportsGuarded},
		{"a blocked change is held", map[string]string{AnnotationAppliedClusterOutputsHash: "e1:a", AnnotationPendingClusterOutputs: pending("e1:b", "h1:x")}, true, "e1:b", "", ExportsHeld},
		{"an approved blocked change is guarded, with its approval", map[string]string{AnnotationAppliedClusterOutputsHash: "e1:a", AnnotationPendingClusterOutputs: pending("e1:b", "h1:x")}, true, "e1:b", "h1:x", ExportsGuarded},
		{"an approval of other inputs does not release it", map[string]string{AnnotationAppliedClusterOutputsHash: "e1:a", AnnotationPendingClusterOutputs: pending("e1:b", "h1:x")}, true, "e1:b", "h1:y", ExportsHeld},
		{"a newer change than the blocked one is guarded", map[string]string{AnnotationAppliedClusterOutputsHash: "e1:a", AnnotationPendingClusterOutputs: pending("e1:b", "h1:x")}, true, "e1:c", "", ExportsGuarded},
		{"exports applied before any record are unknown: guarded", nil, true, "e1:a", "", ExportsGuarded},
		{"a change that failed part-way is never held", map[string]string{AnnotationAppliedClusterOutputsHash: "e1:a", AnnotationPendingClusterOutputs: pending("e1:b", "h1:x"),
			AnnotationPartialClusterOutputs: `{"hash":"e1:b","job":"j"}`}, true, "e1:b", "", ExportsGuarded},
		{"even the exports applied last are guarded after a partial change", map[string]string{AnnotationAppliedClusterOutputsHash: "e1:a",
			AnnotationPartialClusterOutputs: `{"hash":"e1:b","job":"j"}`}, true, "e1:a", "", ExportsGuarded},
		{"an apply that vanished counts as partial", map[string]string{AnnotationAppliedClusterOutputsHash: "e1:a", AnnotationPendingClusterOutputs: pending("e1:b", "h1:x"),
			jobs.AnnotationInterruptedApply: "captf-mp-p1-apply-a3-abcdef"}, true, "e1:b", "", ExportsGuarded},
	} {
		if got := exportsGuardOf(tc.annotations, tc.appliedBefore, tc.current, tc.approval); got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.rule, got, tc.want)
		}
	}
}

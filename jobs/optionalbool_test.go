package jobs

import (
	"testing"

	"k8s.io/utils/ptr"
)

func TestOptionalBoolKeepsAPointersValue(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   *bool
		want OptionalBool
	}{
		{"nil is unset", nil, BoolUnset},
		{"false is false", ptr.To(false), BoolFalse},
		{"true is true", ptr.To(true), BoolTrue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := OptionalBoolOf(tc.in)
			if got != tc.want {
				t.Fatalf("OptionalBoolOf = %d, want %d", got, tc.want)
			}
			back := got.Pointer()
			if (back == nil) != (tc.in == nil) || (back != nil && *back != *tc.in) {
				t.Errorf("Pointer gives %v back for %v", back, tc.in)
			}
			if back != nil && back == tc.in {
				t.Errorf("Pointer gives back the pointer it was made from")
			}
		})
	}
}

package install

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/captf/captf/apis/runs/v1alpha1"
)

// TestFieldSelectorsAreTheDocumentedOnes checks which field selectors the scheme admits.
func TestFieldSelectorsAreTheDocumentedOnes(t *testing.T) {
	scheme := runtime.NewScheme()
	Install(scheme)
	tests := []struct {
		kind, label string
		wantErr     bool
	}{
		{kind: "Run", label: "spec.operation"},
		{kind: "Run", label: "spec.target.name"},
		{kind: "Run", label: "status.phase"},
		{kind: "Run", label: "metadata.name"},
		{kind: "Run", label: "status.retryNumber", wantErr: true},
		{kind: "Run", label: "spec.source", wantErr: true},
		{kind: "Plan", label: "spec.source"},
		{kind: "Plan", label: "status.phase"},
		{kind: "Plan", label: "spec.operation", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.kind+" "+tt.label, func(t *testing.T) {
			_, _, err := scheme.ConvertFieldLabel(v1alpha1.SchemeGroupVersion.WithKind(tt.kind), tt.label, "x")
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "supported: metadata.name") {
				t.Errorf("the error does not name the supported fields: %v", err)
			}
		})
	}
}

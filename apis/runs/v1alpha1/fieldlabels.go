package v1alpha1

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
)

// Field selectors each resource supports, besides metadata.name and metadata.namespace.
var (
	// RunFieldLabels are the fields a run list or watch can select on.
	RunFieldLabels = []string{"metadata.name", "metadata.namespace", "spec.operation", "spec.target.kind", "spec.target.name", "status.phase"}
	// PlanFieldLabels are the fields a plan list or watch can select on.
	PlanFieldLabels = []string{"metadata.name", "metadata.namespace", "spec.source", "spec.target.kind", "spec.target.name", "status.phase"}
)

// addFieldLabelConversionFuncs admits the supported field selectors; the API server answers
// any other with 400 Bad Request naming the supported ones.
func addFieldLabelConversionFuncs(scheme *runtime.Scheme) error {
	for kind, supported := range map[string][]string{"Run": RunFieldLabels, "Plan": PlanFieldLabels} {
		if err := scheme.AddFieldLabelConversionFunc(SchemeGroupVersion.WithKind(kind), fieldLabelFunc(kind, supported)); err != nil {
			return fmt.Errorf("registering the field labels of %s: %w", kind, err)
		}
	}
	return nil
}

func fieldLabelFunc(kind string, supported []string) runtime.FieldLabelConversionFunc {
	return func(label, value string) (string, string, error) {
		for _, s := range supported {
			if label == s {
				return label, value, nil
			}
		}
		return "", "", fmt.Errorf("field label %q is not supported for %s; supported: %s", label, kind, strings.Join(supported, ", "))
	}
}

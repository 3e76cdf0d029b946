package registry

import (
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"

	"github.com/captf/captf/apis/runs"
)

// runFieldSet is the set of fields a run can be selected on; see v1alpha1.RunFieldLabels.
func runFieldSet(obj runtime.Object) fields.Set {
	r, ok := obj.(*runs.Run)
	if !ok {
		return nil
	}
	return fields.Set{
		"metadata.name":      r.Name,
		"metadata.namespace": r.Namespace,
		"spec.operation":     r.Spec.Operation,
		"spec.target.kind":   r.Spec.Target.Kind,
		"spec.target.name":   r.Spec.Target.Name,
		"status.phase":       string(r.Status.Phase),
	}
}

// planFieldSet is the set of fields a plan can be selected on; see v1alpha1.PlanFieldLabels.
func planFieldSet(obj runtime.Object) fields.Set {
	p, ok := obj.(*runs.Plan)
	if !ok {
		return nil
	}
	return fields.Set{
		"metadata.name":      p.Name,
		"metadata.namespace": p.Namespace,
		"spec.source":        string(p.Spec.Source),
		"spec.target.kind":   p.Spec.Target.Kind,
		"spec.target.name":   p.Spec.Target.Name,
		"status.phase":       string(p.Status.Phase),
	}
}

// selectionOf is the selection of a list or watch in namespace. The API server has already
// rejected field selectors on unsupported fields (see v1alpha1.RunFieldLabels).
func selectionOf(namespace string, options *metainternalversion.ListOptions) selection {
	sel := selection{namespace: namespace, label: labels.Everything(), field: fields.Everything()}
	if options == nil {
		return sel
	}
	if options.LabelSelector != nil {
		sel.label = options.LabelSelector
	}
	if options.FieldSelector != nil {
		sel.field = options.FieldSelector
	}
	return sel
}

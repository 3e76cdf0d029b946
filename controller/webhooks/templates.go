// Package webhooks holds the controller's admission webhooks: what the API server cannot check
// with CEL because the answer depends on the request, not only on the object.
package webhooks

import (
	"context"
	"fmt"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
)

// DryRunAnnotation marks the objects of Cluster API's topology dry runs: ClusterClass checks a
// template change with a server-side apply dry run carrying it, and expects it to pass.
const DryRunAnnotation = "topology.cluster.x-k8s.io/dry-run"

// templateSpecPath is the field a Template may not change.
var templateSpecPath = field.NewPath("spec", "template", "spec")

// TemplateValidator keeps a Template's spec.template.spec as created: Cluster API rolls a
// changed template out by creating a new one, and objects already made from it would silently
// differ from it otherwise. Its metadata may change. Cluster API's own dry runs are let through.
type TemplateValidator[T client.Object] struct {
	// Spec returns the object's spec.template.spec.
	Spec func(T) any
}

// ValidateCreate accepts every new Template; the CRD's schema checks its fields.
func (v TemplateValidator[T]) ValidateCreate(context.Context, T) (admission.Warnings, error) {
	return nil, nil
}

// ValidateUpdate refuses a change of spec.template.spec, unless the request is a Cluster API
// topology dry run.
func (v TemplateValidator[T]) ValidateUpdate(ctx context.Context, oldObj, newObj T) (admission.Warnings, error) {
	if apiequality.Semantic.DeepEqual(v.Spec(oldObj), v.Spec(newObj)) {
		return nil, nil
	}
	if req, err := admission.RequestFromContext(ctx); err == nil && ptr.Deref(req.DryRun, false) {
		if _, ok := newObj.GetAnnotations()[DryRunAnnotation]; ok {
			return nil, nil
		}
	}
	gvk := newObj.GetObjectKind().GroupVersionKind()
	return nil, apierrors.NewInvalid(gvk.GroupKind(), newObj.GetName(), field.ErrorList{
		field.Forbidden(templateSpecPath, "is immutable: create a new template and point the objects that use it there"),
	})
}

// ValidateDelete accepts every deletion.
func (v TemplateValidator[T]) ValidateDelete(context.Context, T) (admission.Warnings, error) {
	return nil, nil
}

// Setup registers the webhooks with the manager's webhook server.
func Setup(mgr ctrl.Manager) error {
	for _, register := range []func(ctrl.Manager) error{
		templateWebhook(&infrav1.TerraformClusterTemplate{}, func(t *infrav1.TerraformClusterTemplate) any { return t.Spec.Template.Spec }),
		templateWebhook(&infrav1.TerraformMachineTemplate{}, func(t *infrav1.TerraformMachineTemplate) any { return t.Spec.Template.Spec }),
		templateWebhook(&infrav1.TerraformMachinePoolTemplate{}, func(t *infrav1.TerraformMachinePoolTemplate) any { return t.Spec.Template.Spec }),
	} {
		if err := register(mgr); err != nil {
			return err
		}
	}
	return nil
}

func templateWebhook[T client.Object](obj T, spec func(T) any) func(ctrl.Manager) error {
	return func(mgr ctrl.Manager) error {
		if err := ctrl.NewWebhookManagedBy(mgr, obj).WithValidator(TemplateValidator[T]{Spec: spec}).Complete(); err != nil {
			return fmt.Errorf("registering the webhook of %T: %w", obj, err)
		}
		return nil
	}
}

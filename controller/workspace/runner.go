package workspace

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/captf/captf/controller/jobspec"
	"github.com/captf/captf/jobs"
)

// RunnerClusterRole is the ClusterRole the controller binds to the runner ServiceAccount of
// each namespace it runs Jobs in (shipped in artifacts/controller/rbac.yaml).
const RunnerClusterRole = "captf-runner"

// ensureRunnerIdentity makes sure the default runner ServiceAccount exists in the object's
// namespace and may keep the state there. An override ServiceAccount is the user's to set up.
func (p *pass) ensureRunnerIdentity(ctx context.Context) error {
	if p.obj.WorkspaceSpec().Jobs.ServiceAccountName != "" {
		return nil
	}
	ns := p.obj.GetNamespace()
	name := jobspec.DefaultServiceAccountName
	labels := map[string]string{jobs.LabelManaged: jobs.ManagedValue}
	identity := []struct {
		obj client.Object
		gvk schema.GroupVersionKind
	}{
		{&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}}, serviceAccountGVK},
		{&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: RunnerClusterRole},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
		}, roleBindingGVK},
	}
	for _, id := range identity {
		obj := id.obj
		// Ours carry the managed label, so the metadata cache knows they exist.
		if _, found, err := cachedMetadata(ctx, p.r.Metadata, id.gvk, client.ObjectKeyFromObject(obj)); err == nil && found {
			continue
		}
		err := p.r.APIReader.Get(ctx, client.ObjectKeyFromObject(obj), obj.DeepCopyObject().(client.Object))
		if err == nil {
			continue
		}
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading the runner's %T: %w", obj, err)
		}
		if err := p.r.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the runner's %T: %w", obj, err)
		}
	}
	return nil
}

package workspace

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/jobspec"
	"github.com/captf/captf/jobs"
)

// RunnerClusterRole is the ClusterRole the controller binds to the runner ServiceAccount of
// each namespace it runs Jobs in (shipped in artifacts/controller/rbac.yaml).
const RunnerClusterRole = "captf-runner"

// LabelRunner opts a ServiceAccount in as the identity of an object's Jobs
// (spec.jobs.serviceAccountName); its value must be "true".
const LabelRunner = "captf.io/runner"

// GateRequeue is how soon a pass looks again at a gate a person must open, such as a
// ServiceAccount not yet opted in: the controller does not watch what they change.
const GateRequeue = 30 * time.Second

// runnerServiceAccountReady checks an override ServiceAccount: it is used only when it exists
// and carries captf.io/runner=true. Otherwise anyone who may edit the object could run any image
// under any identity of the namespace. ready is false when no Job may start; the condition says
// why.
func (p *pass) runnerServiceAccountReady(ctx context.Context) (bool, error) {
	name := p.obj.WorkspaceSpec().Jobs.ServiceAccountName
	if name == "" {
		return true, nil
	}
	var sa corev1.ServiceAccount
	err := p.r.APIReader.Get(ctx, client.ObjectKey{Namespace: p.obj.GetNamespace(), Name: name}, &sa)
	var problem string
	switch {
	case apierrors.IsNotFound(err):
		problem = fmt.Sprintf("ServiceAccount %s (spec.jobs.serviceAccountName) does not exist", name)
	case err != nil:
		return false, fmt.Errorf("reading the runner ServiceAccount %s: %w", name, err)
	case sa.Labels[LabelRunner] != "true":
		problem = fmt.Sprintf("ServiceAccount %s (spec.jobs.serviceAccountName) does not carry the label %s=true that lets captf run Jobs under it", name, LabelRunner)
	}
	if problem != "" {
		if c := conditions.Get(p.status().Conditions, conditions.RunnerRBACReady); c == nil || c.Status != metav1.ConditionFalse || c.Message != problem {
			p.event(nil, corev1.EventTypeWarning, EventServiceAccountNotOptedIn, "%s; no Job starts", problem)
		}
	}
	setRunnerRBAC(p.status(), p.stamp(), name, problem)
	return problem == "", nil
}

// cliConfigReady checks spec.jobs.cliConfigSecretRef before a Job mounts it: the Secret exists,
// carries captf.io/cli-config=true and holds the key tofurc. Without the label, anyone who may
// edit the object could mount any Secret of the namespace into a run; without the Secret or the
// key, the pod could not start and would only time out. ready is false when no Job may start;
// the op's condition and an event say why, naming the Secret, never what it holds.
func (p *pass) cliConfigReady(ctx context.Context, op jobs.Op) (bool, error) {
	ref := p.obj.WorkspaceSpec().Jobs.CLIConfigSecretRef
	if ref == nil {
		return true, nil
	}
	var secret corev1.Secret
	err := p.r.APIReader.Get(ctx, client.ObjectKey{Namespace: p.obj.GetNamespace(), Name: ref.Name}, &secret)
	var problem string
	switch {
	case apierrors.IsNotFound(err):
		problem = fmt.Sprintf("Secret %s (spec.jobs.cliConfigSecretRef) does not exist", ref.Name)
	case err != nil:
		return false, fmt.Errorf("reading the CLI configuration Secret %s: %w", ref.Name, err)
	case secret.Labels[infrav1.CLIConfigLabel] != "true":
		problem = fmt.Sprintf("Secret %s (spec.jobs.cliConfigSecretRef) does not carry the label %s=true that lets captf mount it into runs", ref.Name, infrav1.CLIConfigLabel)
	default:
		if _, ok := secret.Data[infrav1.CLIConfigKey]; !ok {
			problem = fmt.Sprintf("Secret %s (spec.jobs.cliConfigSecretRef) has no key %s", ref.Name, infrav1.CLIConfigKey)
		}
	}
	if problem == "" {
		return true, nil
	}
	if c := conditions.Get(p.status().Conditions, conditionFor(op)); c == nil || c.Reason != conditions.ReasonCLIConfigNotFound || c.Message != problem {
		p.event(nil, corev1.EventTypeWarning, EventCLIConfigNotFound, "%s; no Job starts", problem)
	}
	setOpCondition(p.status(), p.stamp(), op, metav1.ConditionFalse, conditions.ReasonCLIConfigNotFound, problem)
	return false, nil
}

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

package workspace

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/jobspec"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/jobs"
)

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

// imageAllowed checks the module image a Job is about to run against the install's allow-list
// and, when the run receives an identity's credentials, the identity's: whoever may edit the
// object chooses the image, and a plan Job runs it with the credentials before any approval.
// ok is false when it may not run; the op's condition and an event say which list refuses it.
func (p *pass) imageAllowed(ctx context.Context, op jobs.Op, image string) bool {
	var problem string
	switch {
	case p.r.AllowedImages != nil && !jobs.ImageAllowed(image, p.r.AllowedImages):
		problem = fmt.Sprintf("the image %s is not among the images the install allows (--allowed-images)", image)
	case p.credentials.Identity != "" && !jobs.ImageAllowed(image, p.credentials.allowedImages):
		problem = fmt.Sprintf("the image %s is not among the images the TerraformClusterIdentity %s allows its credentials to run (spec.allowedImages)", image, p.credentials.Identity)
	default:
		return true
	}
	if c := conditions.Get(p.status().Conditions, conditionFor(op)); c == nil || c.Reason != conditions.ReasonImageNotAllowed || c.Message != problem {
		logf.FromContext(ctx).Info("refusing a Job of an image that is not allowed", "image", image, "op", op, "identity", p.credentials.Identity)
		p.event(nil, corev1.EventTypeWarning, EventImageNotAllowed, "%s; no Job starts", problem)
	}
	setOpCondition(p.status(), p.stamp(), op, metav1.ConditionFalse, conditions.ReasonImageNotAllowed, problem)
	return false
}

// configMapGVK is read only as metadata, by envSourcesReady.
var configMapGVK = corev1.SchemeGroupVersion.WithKind("ConfigMap")

// envSourcesReady checks every Secret and ConfigMap spec.jobs.env takes a value from: each must
// exist and carry captf.io/env=true. Without the label, anyone who may edit the object could
// read any Secret of the namespace from a run, although they may not read Secrets themselves. A
// missing source whose reference is optional is left to the kubelet, which starts the pod
// without it. ready is false when no Job may start; the op's condition and an event name the
// first reference refused, never what the object holds.
func (p *pass) envSourcesReady(ctx context.Context, op jobs.Op) (bool, error) {
	problem, err := p.envSourceProblem(ctx)
	if err != nil || problem == "" {
		return err == nil, err
	}
	if c := conditions.Get(p.status().Conditions, conditionFor(op)); c == nil || c.Reason != conditions.ReasonEnvSourceNotOptedIn || c.Message != problem {
		p.event(nil, corev1.EventTypeWarning, EventEnvSourceNotOptedIn, "%s; no Job starts", problem)
	}
	setOpCondition(p.status(), p.stamp(), op, metav1.ConditionFalse, conditions.ReasonEnvSourceNotOptedIn, problem)
	return false, nil
}

// envSourceProblem says why the first refused env source of the spec is refused, or "".
func (p *pass) envSourceProblem(ctx context.Context) (string, error) {
	for i, e := range p.obj.WorkspaceSpec().Jobs.Env {
		if e.ValueFrom == nil {
			continue
		}
		var obj client.Object
		var kind, name string
		var optional *bool
		switch from := e.ValueFrom; {
		case from.SecretKeyRef != nil:
			obj, kind, name, optional = &metav1.PartialObjectMetadata{}, "Secret", from.SecretKeyRef.Name, from.SecretKeyRef.Optional
			obj.GetObjectKind().SetGroupVersionKind(secretGVK)
		case from.ConfigMapKeyRef != nil:
			obj, kind, name, optional = &metav1.PartialObjectMetadata{}, "ConfigMap", from.ConfigMapKeyRef.Name, from.ConfigMapKeyRef.Optional
			obj.GetObjectKind().SetGroupVersionKind(configMapGVK)
		default:
			// fieldRef and resourceFieldRef read the run's own pod.
			continue
		}
		field := fmt.Sprintf("spec.jobs.env[%d].valueFrom", i)
		err := p.r.APIReader.Get(ctx, client.ObjectKey{Namespace: p.obj.GetNamespace(), Name: name}, obj)
		switch {
		case apierrors.IsNotFound(err) && ptr.Deref(optional, false):
			continue
		case apierrors.IsNotFound(err):
			return fmt.Sprintf("%s %s (%s) does not exist", kind, name, field), nil
		case err != nil:
			return "", fmt.Errorf("reading the %s %s that %s names: %w", kind, name, field, err)
		case obj.GetLabels()[infrav1.EnvSourceLabel] != "true":
			return fmt.Sprintf("%s %s (%s) does not carry the label %s=true that lets captf read it into runs", kind, name, field, infrav1.EnvSourceLabel), nil
		}
	}
	return "", nil
}

// ensureRunnerIdentity makes sure the run can keep its state and nothing else. It creates the
// state Secret and its lock Lease when missing, empty, so the runner never needs create rights
// (RBAC cannot limit a create to a name). Without a serviceAccountName override it also creates
// the object's own runner identity: a ServiceAccount, a Role that may only get and update those
// two objects by name, and the RoleBinding between them. All of it carries the managed label, so
// the metadata cache knows it exists, and the identity is owned by the object, so it goes with it.
func (p *pass) ensureRunnerIdentity(ctx context.Context) error {
	ns, suffix := p.obj.GetNamespace(), p.stateSuffix()
	backendLabels := p.backendLabels()
	owned := []metav1.OwnerReference{p.ownerRef(false)}
	wanted := []wantedObject{
		{&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: state.SecretName(suffix), Namespace: ns, Labels: backendLabels, Annotations: map[string]string{"encoding": "gzip"}},
			Type:       corev1.SecretTypeOpaque,
		}, secretGVK},
		{&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: state.LockLeaseName(suffix), Namespace: ns, Labels: backendLabels}}, leaseGVK},
	}
	if p.obj.WorkspaceSpec().Jobs.ServiceAccountName == "" {
		name := jobs.RunnerIdentityName(suffix)
		labels := p.ownerLabels()
		meta := func() metav1.ObjectMeta {
			return metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, OwnerReferences: owned}
		}
		wanted = append(wanted, []wantedObject{
			{&corev1.ServiceAccount{ObjectMeta: meta()}, serviceAccountGVK},
			{&rbacv1.Role{ObjectMeta: meta(), Rules: RunnerRules(suffix)}, roleGVK},
			{&rbacv1.RoleBinding{
				ObjectMeta: meta(),
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
				Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
			}, roleBindingGVK},
		}...)
	}
	return p.createMissing(ctx, wanted)
}

// wantedObject is an object a pass makes sure exists, and the kind its metadata is cached as.
type wantedObject struct {
	obj client.Object
	gvk schema.GroupVersionKind
}

// createMissing creates the wanted objects the metadata cache does not hold.
func (p *pass) createMissing(ctx context.Context, wanted []wantedObject) error {
	for _, w := range wanted {
		obj := w.obj
		if _, found, err := cachedMetadata(ctx, p.r.Metadata, w.gvk, client.ObjectKeyFromObject(obj)); err == nil && found {
			continue
		}
		// Not in the cache: create it. One that exists all the same (the cache lags behind a
		// create) answers AlreadyExists, which costs no more than reading it first would.
		switch err := p.r.Client.Create(ctx, obj); {
		case apierrors.IsAlreadyExists(err):
		case err != nil:
			return fmt.Errorf("creating the runner's %s %s: %w", w.gvk.Kind, obj.GetName(), err)
		default:
			logf.FromContext(ctx).Info("created what the runner needs", "kind", w.gvk.Kind, "name", obj.GetName())
		}
	}
	return nil
}

// RunnerRules are the rules of an object's runner Role: get and update of its own state Secret
// and lock Lease, by name, and nothing else. In particular no list: a list returns every Secret's
// data. The runner serves the backend's one list (of workspaces) itself.
func RunnerRules(stateSuffix string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "update"}, ResourceNames: []string{state.SecretName(stateSuffix)}},
		{APIGroups: []string{coordinationv1.GroupName}, Resources: []string{"leases"}, Verbs: []string{"get", "update"}, ResourceNames: []string{state.LockLeaseName(stateSuffix)}},
	}
}

// backendLabels are the labels the kubernetes backend would put on the state Secret and lock
// Lease it creates: the Job's backend labels setting and the backend's own.
func (p *pass) backendLabels() map[string]string {
	labels := jobspec.BackendLabelMap(p.r.Kind, p.obj.GetName(), p.obj.GetLabels()[jobs.LabelClusterName])
	for k, v := range state.BackendOwnLabels(p.stateSuffix()) {
		labels[k] = v
	}
	return labels
}

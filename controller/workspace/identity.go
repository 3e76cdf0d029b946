package workspace

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/jobs"
)

// An identity's credentials reach a run through a copy in the object's namespace (the mirror),
// which the Job takes as environment and files: whoever may edit the object never reads the
// identity's Secret, and the credentials are no input, so a rotation reaches the next Job without
// an apply.

// Labels and annotations of a mirror.
const (
	LabelMirrored            = "captf.io/mirrored"
	AnnotationIdentity       = "captf.io/identity"
	AnnotationSourceHash     = "captf.io/source-hash"
	mirrorPrefix             = "captf-creds-"
	maxSecretNameLength      = 253
	mirrorHashedNameHexChars = 16
)

// MirrorName is the name of an identity's mirror in a namespace.
func MirrorName(identity string) string {
	if len(mirrorPrefix+identity) <= maxSecretNameLength {
		return mirrorPrefix + identity
	}
	sum := sha256.Sum256([]byte(identity))
	return mirrorPrefix + hex.EncodeToString(sum[:])[:mirrorHashedNameHexChars]
}

// Credentials are what an object's runs get from its TerraformClusterIdentity.
type Credentials struct {
	// Identity is the identity's name, "" for none: the runs get no credentials.
	Identity string
	// Status, Reason and Message are the IdentityAllowed condition.
	Status  metav1.ConditionStatus
	Reason  string
	Message string
	// data is the identity Secret's data, read live, when allowed.
	data map[string][]byte
	// allowedImages is the identity's spec.allowedImages: the module images its runs may run.
	allowedImages []string
}

// Allowed reports whether the object's runs may start with these credentials.
func (c Credentials) Allowed() bool { return c.Identity == "" || c.Status == metav1.ConditionTrue }

func identityRefused(identity, reason, format string, args ...any) Credentials {
	return Credentials{Identity: identity, Status: metav1.ConditionFalse, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// credentials resolves the object's identity (its own identityRef, else for a machine or pool
// its cluster's; a provisioned machine keeps the one it was provisioned with, pinned on its
// durable inputs) and checks, live, that the object's namespace may use it and that its Secret
// is in the controller's namespace.
func (r *Reconciler) credentials(ctx context.Context, reader client.Reader, obj infrav1.Workspace, durable map[string]string) (Credentials, error) {
	name, pinned := durable[AnnotationIdentity]
	if !pinned || r.KindInfo.InputsMutable(obj) {
		var err error
		if name, err = identityOf(ctx, reader, obj); err != nil {
			return Credentials{}, err
		}
	}
	if name == "" {
		return Credentials{}, nil
	}
	var identity infrav1.TerraformClusterIdentity
	switch err := reader.Get(ctx, client.ObjectKey{Name: name}, &identity); {
	case apierrors.IsNotFound(err):
		return identityRefused(name, conditions.ReasonIdentityNotFound, "the TerraformClusterIdentity %s does not exist", name), nil
	case err != nil:
		return Credentials{}, fmt.Errorf("reading TerraformClusterIdentity %s: %w", name, err)
	}
	allowed, err := namespaceAllowed(ctx, reader, identity.Spec.AllowedNamespaces, obj.GetNamespace())
	if err != nil {
		return Credentials{}, err
	}
	if !allowed {
		return identityRefused(name, conditions.ReasonNamespaceNotAllowed, "the TerraformClusterIdentity %s does not allow the namespace %s", name, obj.GetNamespace()), nil
	}
	ref := identity.Spec.SecretRef
	if ref.Namespace != r.ControllerNamespace {
		// Never read: whoever may write a cluster-scoped identity would otherwise carry any
		// Secret of the cluster into the namespaces it allows.
		return identityRefused(name, conditions.ReasonSecretNotInControllerNamespace, "%s", SecretNamespaceProblem(name, ref.Namespace, r.ControllerNamespace)), nil
	}
	var secret corev1.Secret
	switch err := reader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &secret); {
	case apierrors.IsNotFound(err):
		return identityRefused(name, conditions.ReasonSecretNotFound, "the Secret %s/%s of the TerraformClusterIdentity %s does not exist", ref.Namespace, ref.Name, name), nil
	case err != nil:
		return Credentials{}, fmt.Errorf("reading the Secret of TerraformClusterIdentity %s: %w", name, err)
	}
	return Credentials{Identity: name, Status: metav1.ConditionTrue, Reason: conditions.ReasonIdentityAllowed,
		Message: "the TerraformClusterIdentity " + name + " allows the namespace", data: secret.Data, allowedImages: identity.Spec.AllowedImages}, nil
}

// SecretNamespaceProblem says why the identity's Secret in namespace is not lent by a
// controller running in controllerNamespace.
func SecretNamespaceProblem(identity, namespace, controllerNamespace string) string {
	if controllerNamespace == "" {
		return fmt.Sprintf("the TerraformClusterIdentity %s names a Secret in %s, and the controller's namespace is unknown: it lends no Secret", identity, namespace)
	}
	return fmt.Sprintf("the TerraformClusterIdentity %s names a Secret in %s: only Secrets of the controller's namespace %s are lent", identity, namespace, controllerNamespace)
}

// identityOf is the name of the identity obj's runs use: its own, else for a machine or pool the
// one of the TerraformCluster its Cluster names.
func identityOf(ctx context.Context, reader client.Reader, obj infrav1.Workspace) (string, error) {
	if ref := obj.WorkspaceSpec().IdentityRef; ref != nil {
		return ref.Name, nil
	}
	if _, isCluster := obj.(*infrav1.TerraformCluster); isCluster {
		return "", nil
	}
	clusterName := obj.GetLabels()[jobs.LabelClusterName]
	if clusterName == "" {
		return "", nil
	}
	var cluster clusterv1.Cluster
	if err := reader.Get(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: clusterName}, &cluster); err != nil {
		return "", ignoreAbsent(err)
	}
	infraRef := cluster.Spec.InfrastructureRef
	if infraRef.Kind != infrav1.ClusterKind.Kind || infraRef.APIGroup != infrav1.GroupVersion.Group {
		return "", nil
	}
	var tc infrav1.TerraformCluster
	if err := reader.Get(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: infraRef.Name}, &tc); err != nil {
		return "", ignoreAbsent(err)
	}
	if tc.Spec.IdentityRef == nil {
		return "", nil
	}
	return tc.Spec.IdentityRef.Name, nil
}

func ignoreAbsent(err error) error {
	if apierrors.IsNotFound(err) || apimeta.IsNoMatchError(err) {
		return nil
	}
	return err
}

// namespaceAllowed reports whether an identity's allowed namespaces take in ns: by name, or by
// the namespace's labels (read live). Unset allows none; a selector that does not parse allows
// none.
func namespaceAllowed(ctx context.Context, reader client.Reader, allowed *infrav1.AllowedNamespaces, ns string) (bool, error) {
	if allowed == nil {
		return false, nil
	}
	if slices.Contains(allowed.List, ns) {
		return true, nil
	}
	if allowed.Selector == nil {
		return false, nil
	}
	selector, err := metav1.LabelSelectorAsSelector(allowed.Selector)
	if err != nil {
		return false, nil
	}
	if selector.Empty() {
		return true, nil
	}
	var namespace corev1.Namespace
	if err := reader.Get(ctx, client.ObjectKey{Name: ns}, &namespace); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading namespace %s: %w", ns, err)
	}
	return selector.Matches(labels.Set(namespace.Labels)), nil
}

// sourceHash is the SHA-256 of a Secret's data, keys in order.
func sourceHash(data map[string][]byte) string {
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%d:%s%d:", len(k), k, len(data[k]))
		h.Write(data[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// ensureMirror writes the object's copy of its identity's credentials before a Job that uses
// it: created, its data rewritten when the identity's Secret changed, the object added to its
// owners (so it goes when its last user does). problem says why a Secret of the mirror's name
// cannot be used.
func (p *pass) ensureMirror(ctx context.Context, creds Credentials) (name, problem string, err error) {
	name = MirrorName(creds.Identity)
	hash := sourceHash(creds.data)
	owner := p.ownerRef(false)
	var mirror corev1.Secret
	err = p.r.APIReader.Get(ctx, client.ObjectKey{Namespace: p.obj.GetNamespace(), Name: name}, &mirror)
	switch {
	case apierrors.IsNotFound(err):
		mirror = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: p.obj.GetNamespace(),
				Labels:          map[string]string{jobs.LabelManaged: jobs.ManagedValue, LabelMirrored: "true"},
				Annotations:     map[string]string{AnnotationIdentity: creds.Identity, AnnotationSourceHash: hash},
				OwnerReferences: []metav1.OwnerReference{owner},
			},
			Type: corev1.SecretTypeOpaque,
			Data: creds.data,
		}
		if err := p.r.Client.Create(ctx, &mirror); err != nil {
			return "", "", fmt.Errorf("creating the credentials Secret %s: %w", name, err)
		}
		logf.FromContext(ctx).Info("copied the identity's credentials into the namespace", "identity", creds.Identity, "secret", name)
		p.event(nil, corev1.EventTypeNormal, EventMirrorCreated, "Copied the credentials of TerraformClusterIdentity %s into Secret %s", creds.Identity, name)
		return name, "", nil
	case err != nil:
		return "", "", fmt.Errorf("reading the credentials Secret %s: %w", name, err)
	}
	if mirror.Labels[LabelMirrored] != "true" || mirror.Annotations[AnnotationIdentity] != creds.Identity {
		return "", fmt.Sprintf("the Secret %s exists and is not captf's copy of the TerraformClusterIdentity %s", name, creds.Identity), nil
	}
	owned := slices.ContainsFunc(mirror.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == owner.UID })
	if owned && mirror.Annotations[AnnotationSourceHash] == hash && dataEqual(mirror.Data, creds.data) {
		return name, "", nil
	}
	if !owned {
		mirror.OwnerReferences = append(mirror.OwnerReferences, owner)
	}
	mirror.Data, mirror.Annotations[AnnotationSourceHash] = creds.data, hash
	// An update, so two objects sharing the mirror never overwrite each other's owner.
	if err := p.r.Client.Update(ctx, &mirror); err != nil {
		return "", "", fmt.Errorf("updating the credentials Secret %s: %w", name, err)
	}
	return name, "", nil
}

func dataEqual(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

// releaseMirror drops the object from the owners of its identity's mirror once the identity no
// longer lends it credentials, and deletes the mirror when no owner is left.
func (p *pass) releaseMirror(ctx context.Context, identity string) error {
	name := MirrorName(identity)
	var mirror corev1.Secret
	if err := p.r.APIReader.Get(ctx, client.ObjectKey{Namespace: p.obj.GetNamespace(), Name: name}, &mirror); err != nil {
		return client.IgnoreNotFound(err)
	}
	if mirror.Labels[LabelMirrored] != "true" {
		return nil
	}
	uid := p.obj.GetUID()
	kept := slices.DeleteFunc(slices.Clone(mirror.OwnerReferences), func(r metav1.OwnerReference) bool { return r.UID == uid })
	switch {
	case len(kept) == len(mirror.OwnerReferences):
		return nil
	case len(kept) == 0:
		if err := p.r.Client.Delete(ctx, &mirror, client.Preconditions{UID: &mirror.UID, ResourceVersion: &mirror.ResourceVersion}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting the credentials Secret %s: %w", name, err)
		}
		p.event(nil, corev1.EventTypeNormal, EventMirrorRemoved, "Deleted Secret %s: the TerraformClusterIdentity %s lends this namespace no credentials", name, identity)
		return nil
	}
	mirror.OwnerReferences = kept
	if err := p.r.Client.Update(ctx, &mirror); err != nil {
		return fmt.Errorf("updating the credentials Secret %s: %w", name, err)
	}
	return nil
}

package workspace

import (
	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/captf/captf/jobs"
)

// The kinds whose managed objects' metadata Metadata holds.
var (
	secretGVK         = corev1.SchemeGroupVersion.WithKind("Secret")
	leaseGVK          = coordinationv1.SchemeGroupVersion.WithKind("Lease")
	serviceAccountGVK = corev1.SchemeGroupVersion.WithKind("ServiceAccount")
	roleGVK           = rbacv1.SchemeGroupVersion.WithKind("Role")
	roleBindingGVK    = rbacv1.SchemeGroupVersion.WithKind("RoleBinding")
)

// MetadataKinds are the kinds a Reconciler reads through Metadata; MetadataSelector says which
// of their objects Metadata must hold.
var MetadataKinds = []schema.GroupVersionKind{secretGVK, leaseGVK, serviceAccountGVK, roleGVK, roleBindingGVK}

// MetadataSelector is the label selector of the objects of a MetadataKinds kind whose metadata
// Metadata must hold: those labelled captf.io/managed=true, but for state backups and their
// chunks. Backups are
// only ever read live, and an object keeps several, each with more labels and annotations than
// its state Secret.
func MetadataSelector(gvk schema.GroupVersionKind) labels.Selector {
	managed := labels.SelectorFromSet(labels.Set{jobs.LabelManaged: jobs.ManagedValue})
	if gvk != secretGVK {
		return managed
	}
	notBackup, err := labels.NewRequirement(LabelStateBackup, selection.DoesNotExist, nil)
	if err != nil {
		panic(err) // a constant, valid label key
	}
	notBackupChunk, err := labels.NewRequirement(LabelStateBackupPart, selection.DoesNotExist, nil)
	if err != nil {
		panic(err) // a constant, valid label key
	}
	return managed.Add(*notBackup, *notBackupChunk)
}

// MetadataSelectors is MetadataSelector of each of MetadataKinds.
func MetadataSelectors() map[schema.GroupVersionKind]labels.Selector {
	selectors := make(map[schema.GroupVersionKind]labels.Selector, len(MetadataKinds))
	for _, gvk := range MetadataKinds {
		selectors[gvk] = MetadataSelector(gvk)
	}
	return selectors
}

// cachedMetadata reads an object's metadata from the metadata cache of managed
// objects; found is false when there is no cache or the cache does not have it (not labelled
// for the cache, or not there).
func cachedMetadata(ctx context.Context, cache client.Reader, gvk schema.GroupVersionKind, key types.NamespacedName) (m *metav1.PartialObjectMetadata, found bool, err error) {
	if cache == nil {
		return nil, false, nil
	}
	m = &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(gvk)
	switch err := cache.Get(ctx, key, m); {
	case apierrors.IsNotFound(err):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	return m, true, nil
}

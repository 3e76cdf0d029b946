package workspace

import (
	"context"
	"sync"

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

	"github.com/captf/captf/controller/state"
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
// Metadata must hold: those labelled captf.io/managed=true, but for state backups. Backups are
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
	return managed.Add(*notBackup)
}

// MetadataSelectors is MetadataSelector of each of MetadataKinds.
func MetadataSelectors() map[schema.GroupVersionKind]labels.Selector {
	selectors := make(map[schema.GroupVersionKind]labels.Selector, len(MetadataKinds))
	for _, gvk := range MetadataKinds {
		selectors[gvk] = MetadataSelector(gvk)
	}
	return selectors
}

// stateMemo remembers, per state Secret, what the last live read of it found: the state as
// read and the Secret's resourceVersion. It keeps no outputs, so no state data stays in memory;
// no lineage, which only a backup reads and a remembered state is backed up already; and no
// inputs hash, which is the Secret's inputs-hash annotation, held by the metadata cache for the
// same resourceVersion. While the cached metadata of the Secret shows the same resourceVersion the
// Secret has not changed, and a pass takes the state from here instead of reading the Secret.
// An entry is stored only after the pass that read the Secret backed the state up, so a
// remembered state never needs its data again.
type stateMemo struct {
	mu      sync.Mutex
	entries map[types.NamespacedName]stateMemoEntry
}

// stateMemoEntry is one remembered read.
type stateMemoEntry struct {
	resourceVersion string
	state           state.State
	err             error
	// hashed is whether the state's inputs hash, not kept, was set.
	hashed bool
}

func newStateMemo() *stateMemo {
	return &stateMemo{entries: map[types.NamespacedName]stateMemoEntry{}}
}

// remember stores what a live read of the Secret at resourceVersion found.
func (m *stateMemo) remember(key types.NamespacedName, resourceVersion string, st state.State, err error) {
	if m == nil || resourceVersion == "" {
		return
	}
	hashed := st.InputsHash != ""
	st.Outputs, st.Lineage, st.InputsHash = nil, "", ""
	m.mu.Lock()
	defer m.mu.Unlock()
	m.entries[key] = stateMemoEntry{resourceVersion: resourceVersion, state: st, err: err, hashed: hashed}
}

// forget drops the entry of a Secret, e.g. once its object is gone.
func (m *stateMemo) forget(key types.NamespacedName) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.entries, key)
}

// lookup returns the remembered state of the Secret whose metadata cached holds, when its
// resourceVersion is the remembered one; the state's inputs hash is then the cached annotation.
func (m *stateMemo) lookup(key types.NamespacedName, cached metav1.Object) (stateMemoEntry, bool) {
	if m == nil {
		return stateMemoEntry{}, false
	}
	m.mu.Lock()
	e, ok := m.entries[key]
	m.mu.Unlock()
	if !ok || e.resourceVersion != cached.GetResourceVersion() {
		return stateMemoEntry{}, false
	}
	if e.hashed {
		e.state.InputsHash = cached.GetAnnotations()[state.InputsHashAnnotation]
	}
	return e, true
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

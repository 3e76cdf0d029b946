package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// CachedMetadata is a managed object's metadata as the MetadataCache holds it: what SlimMetadata
// keeps (name, namespace, resourceVersion, labels and annotations), with the labels and
// annotations in one slice of keys and values instead of two maps. An ObjectMeta is 232 bytes
// before anything is set and a Go map of a few strings over 300; a CachedMetadata is 80 bytes
// and its slice 32 a pair. The metadata it does not keep reads as unset, and setting it has no
// effect.
type CachedMetadata struct {
	unkeptMetadata
	keptMetadata
}

var _ client.Object = &CachedMetadata{}

// namedMetadata is the name, namespace and resourceVersion of a cached object, with their
// metav1.Object accessors.
type namedMetadata struct {
	name, namespace, resourceVersion string
}

func (n *namedMetadata) GetName() string                   { return n.name }
func (n *namedMetadata) SetName(name string)               { n.name = name }
func (n *namedMetadata) GetNamespace() string              { return n.namespace }
func (n *namedMetadata) SetNamespace(namespace string)     { n.namespace = namespace }
func (n *namedMetadata) GetResourceVersion() string        { return n.resourceVersion }
func (n *namedMetadata) SetResourceVersion(version string) { n.resourceVersion = version }

// unlabelled gives the label and annotation accessors of a cached object that keeps neither:
// the getters return nil, the setters do nothing.
type unlabelled struct{}

func (unlabelled) GetLabels() map[string]string      { return nil }
func (unlabelled) SetLabels(map[string]string)       {}
func (unlabelled) GetAnnotations() map[string]string { return nil }
func (unlabelled) SetAnnotations(map[string]string)  {}

// keptMetadata is what a CachedMetadata keeps, with its metav1.Object accessors.
type keptMetadata struct {
	namedMetadata
	// pairs holds the labels sorted by key, then the annotations sorted by key, each as its key
	// followed by its value; labels is how many of its strings are the labels'.
	pairs  []string
	labels int
}

// CachedMetadataOf is what the MetadataCache holds of m, with its namespace and keys interned.
func CachedMetadataOf(m *metav1.PartialObjectMetadata) *CachedMetadata {
	c := &CachedMetadata{keptMetadata: keptMetadata{namedMetadata: namedMetadata{name: m.Name, namespace: intern(m.Namespace), resourceVersion: m.ResourceVersion}}}
	c.setPairs(m.Labels, m.Annotations)
	return c
}

// ObjectMeta returns the metadata SlimMetadata would have kept, sharing nothing with c.
func (c *CachedMetadata) ObjectMeta() metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: c.name, Namespace: c.namespace, ResourceVersion: c.resourceVersion, Labels: c.GetLabels(), Annotations: c.GetAnnotations()}
}

// GetObjectKind implements runtime.Object.
func (c *CachedMetadata) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object.
func (c *CachedMetadata) DeepCopyObject() runtime.Object {
	out := *c
	out.pairs = clone(c.pairs)
	return &out
}

func (k *keptMetadata) GetLabels() map[string]string         { return toMap(k.pairs[:k.labels]) }
func (k *keptMetadata) GetAnnotations() map[string]string    { return toMap(k.pairs[k.labels:]) }
func (k *keptMetadata) SetLabels(labels map[string]string)   { k.setPairs(labels, k.GetAnnotations()) }
func (k *keptMetadata) SetAnnotations(ann map[string]string) { k.setPairs(k.GetLabels(), ann) }

// setPairs stores labels and annotations, in a slice of exactly their length.
func (k *keptMetadata) setPairs(labels, annotations map[string]string) {
	k.labels = 2 * len(labels)
	if len(labels)+len(annotations) == 0 {
		k.pairs = nil
		return
	}
	pairs := make([]string, 0, 2*(len(labels)+len(annotations)))
	pairs = appendSorted(pairs, labels)
	k.pairs = appendSorted(pairs, annotations)
}

// appendSorted appends the interned keys of m, each followed by its value, sorted by key.
func appendSorted(pairs []string, m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		pairs = append(pairs, intern(k), m[k])
	}
	return pairs
}

// toMap returns a new map of the keys and values in pairs; nil when there are none.
func toMap(pairs []string) map[string]string {
	if len(pairs) == 0 {
		return nil
	}
	m := make(map[string]string, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		m[pairs[i]] = pairs[i+1]
	}
	return m
}

// unkeptMetadata gives the metav1.Object accessors of what a CachedMetadata does not keep: the
// getters return the zero value, the setters do nothing.
type unkeptMetadata struct{}

func (unkeptMetadata) GetGenerateName() string                       { return "" }
func (unkeptMetadata) SetGenerateName(string)                        {}
func (unkeptMetadata) GetUID() types.UID                             { return "" }
func (unkeptMetadata) SetUID(types.UID)                              {}
func (unkeptMetadata) GetGeneration() int64                          { return 0 }
func (unkeptMetadata) SetGeneration(int64)                           {}
func (unkeptMetadata) GetSelfLink() string                           { return "" }
func (unkeptMetadata) SetSelfLink(string)                            {}
func (unkeptMetadata) GetCreationTimestamp() metav1.Time             { return metav1.Time{} }
func (unkeptMetadata) SetCreationTimestamp(metav1.Time)              {}
func (unkeptMetadata) GetDeletionTimestamp() *metav1.Time            { return nil }
func (unkeptMetadata) SetDeletionTimestamp(*metav1.Time)             {}
func (unkeptMetadata) GetDeletionGracePeriodSeconds() *int64         { return nil }
func (unkeptMetadata) SetDeletionGracePeriodSeconds(*int64)          {}
func (unkeptMetadata) GetFinalizers() []string                       { return nil }
func (unkeptMetadata) SetFinalizers([]string)                        {}
func (unkeptMetadata) GetOwnerReferences() []metav1.OwnerReference   { return nil }
func (unkeptMetadata) SetOwnerReferences([]metav1.OwnerReference)    {}
func (unkeptMetadata) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }
func (unkeptMetadata) SetManagedFields([]metav1.ManagedFieldsEntry)  {}

// MetadataCache is the controller's cache of the metadata of managed objects of a few kinds
// (Secrets, Leases and the runner identities' kinds), each kind limited by a label selector.
// The manager's cache would hold each object as a PartialObjectMetadata with two maps; this one
// holds CachedMetadata. It is the reconcilers' client.Reader of that metadata, the source of
// their watches of it, and a manager runnable.
type MetadataCache struct {
	kinds map[schema.GroupVersionKind]metadataKind
}

// metadataKind is the cache of one kind.
type metadataKind struct {
	ownInformer
	resource schema.GroupResource
}

// ErrMetadataCacheNotSynced is returned by reads of a kind before the cache has listed it, once
// the read's context ends.
var ErrMetadataCacheNotSynced = errors.New("the metadata cache has not listed the kind yet")

// NewMetadataCache returns the cache of the objects of each kind in selectors that match its
// selector, in all namespaces cfg can list. mapper names each kind's resource.
func NewMetadataCache(cfg *rest.Config, httpClient *http.Client, mapper meta.RESTMapper, selectors map[schema.GroupVersionKind]labels.Selector) (*MetadataCache, error) {
	mc, err := metadata.NewForConfigAndClient(metadata.ConfigFor(cfg), httpClient)
	if err != nil {
		return nil, fmt.Errorf("making the metadata cache's client: %w", err)
	}
	c := &MetadataCache{kinds: make(map[schema.GroupVersionKind]metadataKind, len(selectors))}
	for gvk, selector := range selectors {
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return nil, fmt.Errorf("finding the resource of %s: %w", gvk.Kind, err)
		}
		resource := mc.Resource(mapping.Resource)
		selector := selector.String()
		lw := &toolscache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
				opts.LabelSelector = selector
				return resource.List(ctx, opts)
			},
			WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
				opts.LabelSelector = selector
				return resource.Watch(ctx, opts)
			},
		}
		own, err := newOwnInformer(lw, &metav1.PartialObjectMetadata{}, toolscache.Indexers{}, func(m *metav1.PartialObjectMetadata) any {
			return CachedMetadataOf(m)
		}, fmt.Errorf("%w: %s", ErrMetadataCacheNotSynced, gvk.Kind), gvk.Kind+" metadata cache")
		if err != nil {
			return nil, err
		}
		c.kinds[gvk] = metadataKind{ownInformer: own, resource: mapping.Resource.GroupResource()}
	}
	return c, nil
}

// Start runs the cache of each kind until ctx ends.
func (c *MetadataCache) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, k := range c.kinds {
		wg.Go(func() { _ = k.Start(ctx) })
	}
	wg.Wait()
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: the cache fills on every
// replica, like the manager's.
func (c *MetadataCache) NeedLeaderElection() bool { return false }

// Get reads the metadata of the named object into obj, a PartialObjectMetadata that names one of
// the cache's kinds, as SlimMetadata keeps it. An object the cache does not hold is NotFound. A
// read before the kind is listed waits for it, as long as ctx allows.
func (c *MetadataCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return fmt.Errorf("the metadata cache reads into a PartialObjectMetadata, not a %T", obj)
	}
	k, ok := c.kinds[m.GroupVersionKind()]
	if !ok {
		return fmt.Errorf("the metadata cache does not hold %s", m.GroupVersionKind())
	}
	if !k.informer.HasSynced() && !toolscache.WaitForCacheSync(ctx.Done(), k.informer.HasSynced) {
		return k.notSynced
	}
	cached, found, err := k.informer.GetIndexer().GetByKey(key.String())
	if err != nil {
		return fmt.Errorf("reading the metadata cache: %w", err)
	}
	cm, ok := cached.(*CachedMetadata)
	if !found || !ok {
		return apierrors.NewNotFound(k.resource, key.Name)
	}
	m.ObjectMeta = cm.ObjectMeta()
	return nil
}

// List implements client.Reader; the cache serves Gets only, so that nothing lists its kinds
// through another cache that would hold them twice.
func (c *MetadataCache) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	return fmt.Errorf("the metadata cache serves Gets only; a list of %T must read elsewhere", list)
}

// Source is the watch of a kind's cached metadata for a controller, with h mapping an object's
// metadata to requests; the controller waits for the kind to be listed before it starts.
func (c *MetadataCache) Source(gvk schema.GroupVersionKind, h handler.EventHandler) (source.Source, error) {
	k, ok := c.kinds[gvk]
	if !ok {
		return nil, fmt.Errorf("the metadata cache does not hold %s", gvk)
	}
	return k.Source(h), nil
}

package controller

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/captf/captf/jobs"
)

// CachedCluster is a Cluster API Cluster as the ClusterCache holds it: what SlimCluster keeps,
// in a type a fifth the size of a Cluster (a clusterv1.Cluster is 1,000 bytes before anything
// is set, and the controller caches one per TerraformCluster). Of the metadata it keeps the
// name, namespace, UID and resourceVersion.
//
// A CachedCluster lives as long as its Cluster, so it is kept under 257 bytes: out of the
// 288-byte size class of Go's small maps, which every pass allocates and drops by the thousand.
// A long-lived object among short-lived ones of its size keeps their whole span in use after
// they are collected; in the benchmark's heap that cost 2.6 KB per cached Cluster.
type CachedCluster struct {
	unkeptMetadata
	unlabelled
	namedMetadata
	uid                                                        types.UID
	serviceDomain, endpointHost, version                       string
	infraGroup, infraKind, infraName                           string
	services, pods                                             []string
	apiServerPort, endpointPort                                int32
	paused, infrastructureProvisioned, controlPlaneInitialized jobs.OptionalBool
}

var _ client.Object = &CachedCluster{}

// CachedClusterOf is what the ClusterCache holds of c, with the strings Clusters share interned.
func CachedClusterOf(c *clusterv1.Cluster) *CachedCluster {
	slim, _ := SlimCluster(c)
	s := slim.(*clusterv1.Cluster)
	return &CachedCluster{
		namedMetadata:             namedMetadata{name: s.Name, namespace: intern(s.Namespace), resourceVersion: s.ResourceVersion},
		uid:                       s.UID,
		paused:                    jobs.OptionalBoolOf(s.Spec.Paused),
		infrastructureProvisioned: jobs.OptionalBoolOf(s.Status.Initialization.InfrastructureProvisioned),
		controlPlaneInitialized:   jobs.OptionalBoolOf(s.Status.Initialization.ControlPlaneInitialized),
		apiServerPort:             s.Spec.ClusterNetwork.APIServerPort,
		endpointPort:              s.Spec.ControlPlaneEndpoint.Port,
		services:                  s.Spec.ClusterNetwork.Services.CIDRBlocks,
		pods:                      s.Spec.ClusterNetwork.Pods.CIDRBlocks,
		serviceDomain:             intern(s.Spec.ClusterNetwork.ServiceDomain),
		endpointHost:              s.Spec.ControlPlaneEndpoint.Host,
		version:                   intern(s.Spec.Topology.Version),
		infraGroup:                intern(s.Spec.InfrastructureRef.APIGroup),
		infraKind:                 intern(s.Spec.InfrastructureRef.Kind),
		infraName:                 s.Spec.InfrastructureRef.Name,
	}
}

// Cluster returns the Cluster SlimCluster would have kept, sharing nothing with c.
func (c *CachedCluster) Cluster() clusterv1.Cluster {
	out := clusterv1.Cluster{TypeMeta: metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster"}}
	out.ObjectMeta = metav1.ObjectMeta{Name: c.name, Namespace: c.namespace, UID: c.uid, ResourceVersion: c.resourceVersion}
	out.Spec.Paused = c.paused.Pointer()
	out.Spec.ClusterNetwork.APIServerPort = c.apiServerPort
	out.Spec.ClusterNetwork.Services.CIDRBlocks = clone(c.services)
	out.Spec.ClusterNetwork.Pods.CIDRBlocks = clone(c.pods)
	out.Spec.ClusterNetwork.ServiceDomain = c.serviceDomain
	out.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: c.endpointHost, Port: c.endpointPort}
	out.Spec.InfrastructureRef = clusterv1.ContractVersionedObjectReference{APIGroup: c.infraGroup, Kind: c.infraKind, Name: c.infraName}
	out.Spec.Topology.Version = c.version
	out.Status.Initialization.InfrastructureProvisioned = c.infrastructureProvisioned.Pointer()
	out.Status.Initialization.ControlPlaneInitialized = c.controlPlaneInitialized.Pointer()
	return out
}

func clone(s []string) []string {
	if s == nil {
		return nil
	}
	return append([]string(nil), s...)
}

// GetUID implements metav1.Object.
func (c *CachedCluster) GetUID() types.UID { return c.uid }

// SetUID implements metav1.Object.
func (c *CachedCluster) SetUID(uid types.UID) { c.uid = uid }

// GetObjectKind implements runtime.Object.
func (c *CachedCluster) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object.
func (c *CachedCluster) DeepCopyObject() runtime.Object {
	out := *c
	out.services, out.pods = clone(c.services), clone(c.pods)
	return &out
}

// ClusterCache is the controller's cache of Cluster API Clusters. The manager's cache would hold
// each as a clusterv1.Cluster; this one holds CachedClusters. Reads of Clusters through
// ClusterCache.Client and the reconcilers' watches of Clusters are served from it. It is a
// manager runnable.
type ClusterCache struct {
	ownInformer
}

// ErrClusterCacheNotSynced is returned by reads before the cache has listed the Clusters.
var ErrClusterCacheNotSynced = errors.New("the Cluster cache has not listed the Clusters yet")

// NewClusterCache returns the cache of the Clusters the manager's config can list.
func NewClusterCache(mgr ctrl.Manager) (*ClusterCache, error) {
	gvk := clusterv1.GroupVersion.WithKind("ClusterList")
	rc, err := apiutil.RESTClientForGVK(gvk, false, false, mgr.GetConfig(), serializer.NewCodecFactory(mgr.GetScheme()), mgr.GetHTTPClient())
	if err != nil {
		return nil, fmt.Errorf("making the Cluster cache's client: %w", err)
	}
	params := runtime.NewParameterCodec(mgr.GetScheme())
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list := &clusterv1.ClusterList{}
			return list, rc.Get().Resource("clusters").VersionedParams(&opts, params).Do(ctx).Into(list)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.Watch = true
			return rc.Get().Resource("clusters").VersionedParams(&opts, params).Watch(ctx)
		},
	}
	own, err := newOwnInformer(lw, &clusterv1.Cluster{}, toolscache.Indexers{}, func(c *clusterv1.Cluster) any {
		return CachedClusterOf(c)
	}, ErrClusterCacheNotSynced, "Cluster cache")
	if err != nil {
		return nil, err
	}
	return &ClusterCache{ownInformer: own}, nil
}

// Get reads the named Cluster into out, as SlimCluster keeps it; a Cluster the cache does not
// hold is NotFound.
func (c *ClusterCache) Get(key client.ObjectKey, out *clusterv1.Cluster) error {
	if !c.informer.HasSynced() {
		return ErrClusterCacheNotSynced
	}
	obj, found, err := c.informer.GetIndexer().GetByKey(key.String())
	if err != nil {
		return fmt.Errorf("reading the Cluster cache: %w", err)
	}
	cached, ok := obj.(*CachedCluster)
	if !found || !ok {
		return apierrors.NewNotFound(clusterv1.GroupVersion.WithResource("clusters").GroupResource(), key.Name)
	}
	*out = cached.Cluster()
	return nil
}

// Client returns c with its Gets of Clusters served by the cache.
func (c *ClusterCache) Client(cl client.Client) client.Client {
	return clusterReadingClient{Client: cl, clusters: c}
}

type clusterReadingClient struct {
	client.Client
	clusters *ClusterCache
}

// Get implements client.Reader.
func (c clusterReadingClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if cluster, ok := obj.(*clusterv1.Cluster); ok {
		return c.clusters.Get(key, cluster)
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

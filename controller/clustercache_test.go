package controller_test

import (
	"reflect"
	"testing"
	"unsafe"

	"k8s.io/utils/ptr"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/captf/captf/controller"
)

func TestTheClusterCacheGivesBackWhatSlimClusterKeeps(t *testing.T) {
	var full clusterv1.Cluster
	fill(reflect.ValueOf(&full).Elem(), 0)
	unset := full.DeepCopy()
	unset.Spec.Paused, unset.Status.Initialization.InfrastructureProvisioned, unset.Status.Initialization.ControlPlaneInitialized = nil, nil, ptr.To(false)
	unset.Spec.ClusterNetwork.Pods.CIDRBlocks = nil
	for name, c := range map[string]*clusterv1.Cluster{"every field set": &full, "unset and false fields": unset} {
		t.Run(name, func(t *testing.T) {
			slimmed, err := controller.SlimCluster(c.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			want := *slimmed.(*clusterv1.Cluster)
			want.TypeMeta.APIVersion, want.TypeMeta.Kind = clusterv1.GroupVersion.String(), "Cluster"
			cached := controller.CachedClusterOf(c)
			got := cached.Cluster()
			if !reflect.DeepEqual(got, want) {
				t.Errorf("the cache gives back\n%+v\nSlimCluster keeps\n%+v", got, want)
			}
			// What a reader gets is its own: changing it leaves the cache as it was.
			if got.Spec.Paused != nil {
				*got.Spec.Paused = !*got.Spec.Paused
			}
			if len(got.Spec.ClusterNetwork.Services.CIDRBlocks) > 0 {
				got.Spec.ClusterNetwork.Services.CIDRBlocks[0] = "changed"
			}
			if again := cached.Cluster(); !reflect.DeepEqual(again, want) {
				t.Errorf("a change to a Cluster read from the cache reached the cache")
			}
			cp := cached.DeepCopyObject().(*controller.CachedCluster)
			if !reflect.DeepEqual(cp.Cluster(), want) {
				t.Errorf("the deep copy differs")
			}
		})
	}
}

// TestACachedClusterStaysOutOfTheSizeClassOfSmallMaps: a CachedCluster lives as long as its
// Cluster, and in the 288-byte size class of Go's small maps, which every pass allocates and
// drops, it would keep a whole span of them in use.
func TestACachedClusterStaysOutOfTheSizeClassOfSmallMaps(t *testing.T) {
	if size := unsafe.Sizeof(controller.CachedCluster{}); size > 256 {
		t.Errorf("a CachedCluster is %d bytes, over 256", size)
	}
}

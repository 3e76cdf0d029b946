package cache_test

import (
	"encoding/json"
	"reflect"
	"sort"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/internal/cache"
)

// fill sets every exported field reachable from v to a non-zero value (one element per slice
// and map), so that a transform's output shows each field it keeps and none it drops.
func fill(v reflect.Value, depth int) {
	if depth > 12 {
		return
	}
	switch v.Interface().(type) {
	case metav1.Time:
		v.Set(reflect.ValueOf(metav1.Unix(1, 0)))
		return
	case []byte:
		// Raw JSON fields must stay valid JSON.
		v.SetBytes([]byte(`"x"`))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), depth+1)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0), depth+1)
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		key, val := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(key, depth+1)
		fill(val, depth+1)
		v.SetMapIndex(key, val)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), depth+1)
			}
		}
	}
}

// leaves flattens an object's JSON to its leaf values by path ("spec.pods.cidrBlocks[]").
func leaves(t *testing.T, obj any) map[string]any {
	t.Helper()
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if path != "" {
					k = path + "." + k
				}
				walk(k, e)
			}
		case []any:
			for _, e := range v {
				walk(path+"[]", e)
			}
		default:
			out[path] = v
		}
	}
	walk("", doc)
	return out
}

// checkKeeps transforms a fully set object and checks that exactly the paths of kept survive,
// with their values.
func checkKeeps(t *testing.T, transform toolscache.TransformFunc, full any, kept []struct{ path, readBy string }) {
	t.Helper()
	in := leaves(t, full)
	slimmed, err := transform(full)
	if err != nil {
		t.Fatal(err)
	}
	out := leaves(t, slimmed)
	want := map[string]bool{}
	for _, k := range kept {
		want[k.path] = true
		t.Run(k.path, func(t *testing.T) {
			got, ok := out[k.path]
			if _, set := in[k.path]; !set {
				t.Fatalf("the full object does not set %s, read by %s", k.path, k.readBy)
			}
			if !ok || !reflect.DeepEqual(got, in[k.path]) {
				t.Errorf("%s (read by %s) = %v, want %v", k.path, k.readBy, got, in[k.path])
			}
		})
	}
	var extra []string
	for path := range out {
		if !want[path] {
			extra = append(extra, path)
		}
	}
	sort.Strings(extra)
	if len(extra) > 0 {
		t.Errorf("kept fields nothing reads: %v", extra)
	}
	again, err := transform(slimmed)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, slimmed) {
		t.Errorf("a second transform changed the object:\n%#v\nwant\n%#v", again, slimmed)
	}
}

func TestSlimClusterKeepsWhatTheReconcilersRead(t *testing.T) {
	var full clusterv1.Cluster
	fill(reflect.ValueOf(&full).Elem(), 0)
	checkKeeps(t, cache.SlimCluster, &full, []struct{ path, readBy string }{
		{"apiVersion", "the scheme"},
		{"kind", "the scheme"},
		{"metadata.name", "the cache's key; contract input cluster_name"},
		{"metadata.namespace", "the cache's key; Cluster watch"},
		{"metadata.uid", "backReferenceProblem: the owner reference's UID"},
		{"metadata.resourceVersion", "the informer's store"},
		{"spec.paused", "PauseOf"},
		{"spec.infrastructureRef.apiGroup", "backReferenceProblem, clusterInfrastructure, identityOf"},
		{"spec.infrastructureRef.kind", "backReferenceProblem, clusterInfrastructure, identityOf"},
		{"spec.infrastructureRef.name", "backReferenceProblem, clusterInfrastructure, identityOf"},
		{"spec.controlPlaneEndpoint.host", "clusterDependencies: contract input cluster.control_plane_endpoint"},
		{"spec.controlPlaneEndpoint.port", "clusterDependencies: contract input cluster.control_plane_endpoint"},
		{"spec.topology.version", "clusterDependencies: contract input cluster.kubernetes_version"},
		{"spec.clusterNetwork.apiServerPort", "clusterDependencies: contract input cluster.network"},
		{"spec.clusterNetwork.pods.cidrBlocks[]", "clusterDependencies: contract input cluster.network"},
		{"spec.clusterNetwork.services.cidrBlocks[]", "clusterDependencies: contract input cluster.network"},
		{"spec.clusterNetwork.serviceDomain", "clusterDependencies: contract input cluster.network"},
		{"status.initialization.controlPlaneInitialized", "clusterDependencies: contract input control_plane_initialized"},
		{"status.initialization.infrastructureProvisioned", "clusterInfrastructure: a machine waits for it"},
	})
}

func TestSlimMetadataKeepsWhatTheReconcilersRead(t *testing.T) {
	var full metav1.PartialObjectMetadata
	fill(reflect.ValueOf(&full).Elem(), 0)
	checkKeeps(t, cache.SlimMetadata, &full, []struct{ path, readBy string }{
		{"apiVersion", "the scheme"},
		{"kind", "the scheme"},
		{"metadata.name", "the cache's key"},
		{"metadata.namespace", "the cache's key; secretOwners"},
		{"metadata.resourceVersion", "readState: the state memo; the informer's store"},
		{"metadata.labels.x", "secretOwners: the owner kind and name labels"},
		{"metadata.annotations.x", "readDurable: the durable inputs' records; checkStateLock: the lock details"},
	})
}

func TestSlimClusterPassesOtherObjects(t *testing.T) {
	tombstone := toolscache.DeletedFinalStateUnknown{Key: "ns/c"}
	out, err := cache.SlimCluster(tombstone)
	if err != nil || !reflect.DeepEqual(out, tombstone) {
		t.Errorf("SlimCluster(tombstone) = %v, %v", out, err)
	}
}

func TestStripUnread(t *testing.T) {
	applied := map[string]string{corev1.LastAppliedConfigAnnotation: `{"data":{"key":"c2VjcmV0"}}`}
	managed := []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}
	for _, tc := range []struct {
		name string
		in   metav1.ObjectMeta
		want metav1.ObjectMeta
	}{
		{"managed fields are dropped", metav1.ObjectMeta{Name: "s", ManagedFields: managed}, metav1.ObjectMeta{Name: "s"}},
		{"the last-applied configuration is dropped", metav1.ObjectMeta{Name: "s", Annotations: map[string]string{corev1.LastAppliedConfigAnnotation: "{}", "a": "1"}},
			metav1.ObjectMeta{Name: "s", Annotations: map[string]string{"a": "1"}}},
		{"no annotations are left when it was the only one", metav1.ObjectMeta{Name: "s", Annotations: applied}, metav1.ObjectMeta{Name: "s"}},
		{"other annotations, labels and owners are kept",
			metav1.ObjectMeta{Name: "s", Labels: map[string]string{"l": "1"}, Annotations: map[string]string{"a": "1"}, OwnerReferences: []metav1.OwnerReference{{Name: "o"}}},
			metav1.ObjectMeta{Name: "s", Labels: map[string]string{"l": "1"}, Annotations: map[string]string{"a": "1"}, OwnerReferences: []metav1.OwnerReference{{Name: "o"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, obj := range []metav1.Object{
				&corev1.Secret{ObjectMeta: *tc.in.DeepCopy(), Data: map[string][]byte{"key": []byte("secret")}},
				&metav1.PartialObjectMetadata{ObjectMeta: *tc.in.DeepCopy()},
			} {
				out, err := cache.StripUnread(obj)
				if err != nil {
					t.Fatal(err)
				}
				got := out.(metav1.ObjectMetaAccessor).GetObjectMeta().(*metav1.ObjectMeta)
				if !reflect.DeepEqual(*got, tc.want) {
					t.Errorf("%T: got %+v, want %+v", obj, *got, tc.want)
				}
			}
		})
	}
	t.Run("the rest of an object is kept", func(t *testing.T) {
		out, _ := cache.StripUnread(&corev1.Secret{Data: map[string][]byte{"key": []byte("secret")}})
		if got := out.(*corev1.Secret).Data; string(got["key"]) != "secret" {
			t.Errorf("data = %v", got)
		}
	})
	t.Run("a tombstone passes", func(t *testing.T) {
		tombstone := toolscache.DeletedFinalStateUnknown{Key: "ns/s"}
		if out, err := cache.StripUnread(tombstone); err != nil || !reflect.DeepEqual(out, tombstone) {
			t.Errorf("StripUnread(tombstone) = %v, %v", out, err)
		}
	})
}

// decoded returns a copy of s in memory of its own, as each object an informer decodes has.
func decoded(s string) string { return string([]byte(s)) }

func TestIntern(t *testing.T) {
	object := func() *infrav1.TerraformCluster {
		return &infrav1.TerraformCluster{
			TypeMeta: metav1.TypeMeta{APIVersion: decoded("infrastructure.cluster.x-k8s.io/v1alpha1"), Kind: decoded("TerraformCluster")},
			ObjectMeta: metav1.ObjectMeta{
				Name: decoded("web"), Namespace: decoded("team"), UID: "u",
				Labels:          map[string]string{decoded("cluster.x-k8s.io/cluster-name"): decoded("web")},
				Annotations:     map[string]string{decoded("captf.io/approved-plan"): decoded("p3:abc")},
				Finalizers:      []string{decoded("terraformcluster.infrastructure.cluster.x-k8s.io")},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: decoded("cluster.x-k8s.io/v1beta2"), Kind: decoded("Cluster"), Name: decoded("web"), UID: "c"}},
			},
			Status: infrav1.TerraformClusterStatus{WorkspaceStatus: infrav1.WorkspaceStatus{Conditions: append(make([]metav1.Condition, 0, 8), metav1.Condition{
				Type: decoded("Ready"), Status: metav1.ConditionStatus(decoded("True")), Reason: decoded("Provisioned"), Message: decoded("owned by Cluster web"),
				LastTransitionTime: metav1.Unix(1, 0), ObservedGeneration: 2,
			})}},
		}
	}
	a, b := object(), object()
	want := a.DeepCopy()
	for _, obj := range []*infrav1.TerraformCluster{a, b} {
		out, err := cache.Intern(obj)
		if err != nil || out != any(obj) {
			t.Fatalf("Intern = %v, %v; want the object it was given", out, err)
		}
	}
	if !reflect.DeepEqual(a, want) {
		t.Fatalf("Intern changed the object:\n%+v\nwant\n%+v", a, want)
	}
	key := func(m map[string]string) string {
		for k := range m {
			return k
		}
		return ""
	}
	same := func(x, y string) bool { return unsafe.StringData(x) == unsafe.StringData(y) }
	for _, tc := range []struct {
		name   string
		of     func(*infrav1.TerraformCluster) string
		shared bool
	}{
		{"apiVersion", func(o *infrav1.TerraformCluster) string { return o.APIVersion }, true},
		{"kind", func(o *infrav1.TerraformCluster) string { return o.Kind }, true},
		{"namespace", func(o *infrav1.TerraformCluster) string { return o.Namespace }, true},
		{"label key", func(o *infrav1.TerraformCluster) string { return key(o.Labels) }, true},
		{"annotation key", func(o *infrav1.TerraformCluster) string { return key(o.Annotations) }, true},
		{"finalizer", func(o *infrav1.TerraformCluster) string { return o.Finalizers[0] }, true},
		{"owner reference API version", func(o *infrav1.TerraformCluster) string { return o.OwnerReferences[0].APIVersion }, true},
		{"owner reference kind", func(o *infrav1.TerraformCluster) string { return o.OwnerReferences[0].Kind }, true},
		{"condition type", func(o *infrav1.TerraformCluster) string { return o.Status.Conditions[0].Type }, true},
		{"condition status", func(o *infrav1.TerraformCluster) string { return string(o.Status.Conditions[0].Status) }, true},
		{"condition reason", func(o *infrav1.TerraformCluster) string { return o.Status.Conditions[0].Reason }, true},
		{"name: one object's own", func(o *infrav1.TerraformCluster) string { return o.Name }, false},
		{"label value: mostly one object's own", func(o *infrav1.TerraformCluster) string { return o.Labels[key(o.Labels)] }, false},
		{"annotation value: mostly one object's own", func(o *infrav1.TerraformCluster) string { return o.Annotations[key(o.Annotations)] }, false},
		{"owner reference name", func(o *infrav1.TerraformCluster) string { return o.OwnerReferences[0].Name }, false},
		{"condition message", func(o *infrav1.TerraformCluster) string { return o.Status.Conditions[0].Message }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := same(tc.of(a), tc.of(b)); got != tc.shared {
				t.Errorf("two objects share their %s: %v, want %v", tc.name, got, tc.shared)
			}
		})
	}
	t.Run("conditions have a slice of their length", func(t *testing.T) {
		if c := a.Status.Conditions; cap(c) != len(c) {
			t.Errorf("cap %d, len %d", cap(c), len(c))
		}
	})
	t.Run("a tombstone passes", func(t *testing.T) {
		tombstone := toolscache.DeletedFinalStateUnknown{Key: "ns/s"}
		if out, err := cache.Intern(tombstone); err != nil || !reflect.DeepEqual(out, tombstone) {
			t.Errorf("Intern(tombstone) = %v, %v", out, err)
		}
	})
}

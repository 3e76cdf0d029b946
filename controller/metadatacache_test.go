package controller_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	"github.com/captf/captf/controller"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/test/testenv"
)

func TestTheMetadataCacheGivesBackWhatSlimMetadataKeeps(t *testing.T) {
	full := func() *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
			Name: "tfstate-default-c1", Namespace: "ns", ResourceVersion: "42", UID: "u", Generation: 3,
			Labels:          map[string]string{"b": "2", "a": "1", jobs.LabelManaged: jobs.ManagedValue},
			Annotations:     map[string]string{"z": "26", "encoding": "gzip"},
			Finalizers:      []string{"f"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "TerraformCluster", Name: "c1"}},
		}}
	}
	for name, m := range map[string]*metav1.PartialObjectMetadata{
		"labels and annotations": full(),
		"labels only":            func() *metav1.PartialObjectMetadata { m := full(); m.Annotations = nil; return m }(),
		"annotations only":       func() *metav1.PartialObjectMetadata { m := full(); m.Labels = nil; return m }(),
		"neither":                {ObjectMeta: metav1.ObjectMeta{Name: "n", Namespace: "ns", ResourceVersion: "1"}},
	} {
		t.Run(name, func(t *testing.T) {
			slimmed, err := controller.SlimMetadata(m.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			want := slimmed.(*metav1.PartialObjectMetadata).ObjectMeta
			cached := controller.CachedMetadataOf(m)
			if got := cached.ObjectMeta(); !reflect.DeepEqual(got, want) {
				t.Fatalf("the cache gives back\n%+v\nSlimMetadata keeps\n%+v", got, want)
			}
			// What a reader gets is its own: changing it leaves the cache as it was.
			got := cached.ObjectMeta()
			if got.Labels != nil {
				got.Labels["a"] = "changed"
			}
			if again := cached.ObjectMeta(); !reflect.DeepEqual(again, want) {
				t.Errorf("a change to metadata read from the cache reached the cache")
			}
			if cp := cached.DeepCopyObject().(*controller.CachedMetadata); !reflect.DeepEqual(cp.ObjectMeta(), want) {
				t.Errorf("the deep copy differs")
			}
			// As a metav1.Object: what it keeps can be set, what it does not reads as unset.
			cached.SetLabels(map[string]string{"x": "y"})
			cached.SetAnnotations(map[string]string{"p": "q"})
			cached.SetUID("set")
			cached.SetFinalizers([]string{"set"})
			if !reflect.DeepEqual(cached.GetLabels(), map[string]string{"x": "y"}) || !reflect.DeepEqual(cached.GetAnnotations(), map[string]string{"p": "q"}) {
				t.Errorf("labels %v and annotations %v after setting them", cached.GetLabels(), cached.GetAnnotations())
			}
			if cached.GetUID() != "" || cached.GetFinalizers() != nil || cached.GetOwnerReferences() != nil || cached.GetGeneration() != 0 {
				t.Errorf("metadata the cache does not keep reads as set")
			}
		})
	}
}

// TestTheMetadataCacheHoldsWhatTheSelectorsSelect runs the metadata cache against the real API
// server with the reconcilers' selectors: it holds managed Secrets and Leases and follows their
// changes, and holds neither unmanaged Secrets nor state backups.
func TestTheMetadataCacheHoldsWhatTheSelectorsSelect(t *testing.T) {
	env := testenv.Get(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := "metadata-cache"
	admin := adminIn(ctx, t, env, ns)
	managed := map[string]string{jobs.LabelManaged: jobs.ManagedValue}
	backup := map[string]string{jobs.LabelManaged: jobs.ManagedValue, workspace.LabelStateBackup: "true"}
	for _, obj := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "state", Namespace: ns, Labels: managed, Annotations: map[string]string{"encoding": "gzip"}}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "backup", Namespace: ns, Labels: backup}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "unmanaged", Namespace: ns}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "lock", Namespace: ns, Labels: managed}},
	} {
		if err := admin.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}

	httpClient, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(env.Config, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	cache, err := controller.NewMetadataCache(env.Config, httpClient, mapper, workspace.MetadataSelectors())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cache.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("cache: %v", err)
		}
	}()

	secretGVK := corev1.SchemeGroupVersion.WithKind("Secret")
	get := func(gvk schema.GroupVersionKind, name string) (*metav1.PartialObjectMetadata, error) {
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(gvk)
		return m, cache.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, m)
	}
	for _, tc := range []struct {
		rule, object string
		gvk          schema.GroupVersionKind
		held         bool
	}{
		{"a managed Secret is held", "state", secretGVK, true},
		{"a state backup is not held", "backup", secretGVK, false},
		{"an unmanaged Secret is not held", "unmanaged", secretGVK, false},
		{"a managed Lease is held", "lock", coordinationv1.SchemeGroupVersion.WithKind("Lease"), true},
	} {
		name := tc.object
		m, err := get(tc.gvk, name)
		switch {
		case tc.held && err != nil:
			t.Errorf("%s: %v", tc.rule, err)
		case !tc.held && !apierrors.IsNotFound(err):
			t.Errorf("%s: got %v, want NotFound", tc.rule, err)
		case tc.held && (m.Name != name || m.Namespace != ns || m.ResourceVersion == "" || m.Labels[jobs.LabelManaged] != jobs.ManagedValue):
			t.Errorf("%s: got %+v", tc.rule, m.ObjectMeta)
		}
	}

	// A change reaches the cache.
	if err := admin.Patch(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "state", Namespace: ns}},
		client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"annotations":{"captf.io/inputs-hash":"h2"}}}`))); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		m, err := get(secretGVK, "state")
		return err == nil && m.Annotations["captf.io/inputs-hash"] == "h2" && m.Annotations["encoding"] == "gzip", nil
	}); err != nil {
		t.Errorf("the changed annotation never reached the cache: %v", err)
	}
	if err := admin.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "state", Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, err := get(secretGVK, "state")
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Errorf("the deleted Secret stayed in the cache: %v", err)
	}

	// It reads and watches its kinds only, and serves no lists.
	if _, err := get(corev1.SchemeGroupVersion.WithKind("ConfigMap"), "any"); err == nil || apierrors.IsNotFound(err) {
		t.Errorf("a read of a kind the cache does not hold: %v, want an error other than NotFound", err)
	}
	if err := cache.List(ctx, &metav1.PartialObjectMetadataList{}); err == nil {
		t.Errorf("a list was served")
	}
	if _, err := cache.Source(corev1.SchemeGroupVersion.WithKind("ConfigMap"), &handler.EnqueueRequestForObject{}); err == nil {
		t.Errorf("a watch of a kind the cache does not hold was given")
	}
	if src, err := cache.Source(secretGVK, &handler.EnqueueRequestForObject{}); err != nil || src == nil {
		t.Errorf("the watch of Secrets: %v", err)
	}
}

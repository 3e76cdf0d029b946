package controller_test

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/captf/captf/controller"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/test/testenv"
)

// TestTheManagerCacheHoldsTheMetadataTheSelectorsSelect runs a cache with the manager's options
// against the real API server: of Secrets and Leases it holds the metadata of managed ones and
// follows their changes, and holds neither unmanaged Secrets nor state backups.
func TestTheManagerCacheHoldsTheMetadataTheSelectorsSelect(t *testing.T) {
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
	opts := controller.ManagerOptions(ctrl.Options{Scheme: controller.NewScheme()}).Cache
	opts.Scheme = controller.NewScheme()
	c, err := cache.New(env.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("the cache did not start")
	}

	secretGVK := corev1.SchemeGroupVersion.WithKind("Secret")
	get := func(gvk schema.GroupVersionKind, name string) (*metav1.PartialObjectMetadata, error) {
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(gvk)
		return m, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, m)
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
		m, err := get(tc.gvk, tc.object)
		switch {
		case tc.held && err != nil:
			t.Errorf("%s: %v", tc.rule, err)
		case !tc.held && !apierrors.IsNotFound(err):
			t.Errorf("%s: got %v, want NotFound", tc.rule, err)
		case tc.held && (m.Name != tc.object || m.Namespace != ns || m.ResourceVersion == "" || m.Labels[jobs.LabelManaged] != jobs.ManagedValue):
			t.Errorf("%s: got %+v", tc.rule, m.ObjectMeta)
		}
	}

	// A change reaches the cache, and so does a delete.
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
}

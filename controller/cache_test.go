package controller_test

import (
	"context"
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller"
	captfcache "github.com/captf/captf/controller/internal/cache"
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
	opts := controller.ManagerOptions(ctrl.Options{Scheme: controller.NewScheme()}, controller.Scope{}).Cache
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

// TestTheManagerCacheHoldsOnlyWhatItsScopeReconciles runs the manager's cache and the Job cache
// with a --namespace and with a --watch-filter against the real API server.
func TestTheManagerCacheHoldsOnlyWhatItsScopeReconciles(t *testing.T) {
	env := testenv.Get(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in, out := "scope-in", "scope-out"
	admin := adminIn(ctx, t, env, in)
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: out}}); err != nil {
		t.Fatal(err)
	}
	teamA := map[string]string{clusterv1.WatchLabel: "team-a"}
	teamB := map[string]string{clusterv1.WatchLabel: "team-b"}
	managed := map[string]string{jobs.LabelManaged: jobs.ManagedValue}
	source := infrav1.WorkspaceSpec{Source: infrav1.SourceSpec{Image: "modules/net:v1"}}
	objects := []client.Object{
		&infrav1.TerraformClusterIdentity{ObjectMeta: metav1.ObjectMeta{Name: "scope-shared"},
			Spec: infrav1.TerraformClusterIdentitySpec{SecretRef: infrav1.SecretReference{Name: "creds", Namespace: "captf-system"}}},
	}
	for _, ns := range []string{in, out} {
		objects = append(objects,
			&infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "labelled", Namespace: ns, Labels: teamA}, Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: source}},
			&infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "unlabelled", Namespace: ns}, Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: source}},
			&infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "other-team", Namespace: ns, Labels: teamB}, Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: source}},
			&infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: "labelled", Namespace: ns, Labels: teamA}, Spec: infrav1.TerraformMachineSpec{WorkspaceSpec: source}},
			&clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: ns}, Spec: clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: infrav1.GroupVersion.Group, Kind: infrav1.ClusterKind.Kind, Name: "labelled",
			}}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "state", Namespace: ns, Labels: managed}},
			managedJob(ns, "run", teamA),
			managedJob(ns, "other-run", nil),
		)
	}
	for _, obj := range objects {
		if err := admin.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}

	for _, tc := range []struct {
		rule  string
		scope controller.Scope
		// held are the objects of the test the caches hold, by kind.
		held map[string][]string
	}{
		{"a namespace flag caches nothing of other namespaces, and every identity", controller.Scope{Namespace: in}, map[string][]string{
			"TerraformCluster":         {in + "/labelled", in + "/other-team", in + "/unlabelled"},
			"TerraformMachine":         {in + "/labelled"},
			"Cluster":                  {in + "/plain"},
			"Secret":                   {in + "/state"},
			"Job":                      {in + "/other-run", in + "/run"},
			"TerraformClusterIdentity": {"/scope-shared"},
		}},
		{"a watch filter caches only the captf objects and Jobs that carry its label, and every Cluster and identity", controller.Scope{WatchFilter: "team-a"}, map[string][]string{
			"TerraformCluster":         {in + "/labelled", out + "/labelled"},
			"TerraformMachine":         {in + "/labelled", out + "/labelled"},
			"Cluster":                  {in + "/plain", out + "/plain"},
			"Secret":                   {in + "/state", out + "/state"},
			"Job":                      {in + "/run", out + "/run"},
			"TerraformClusterIdentity": {"/scope-shared"},
		}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			held := scopeHeld(ctx, t, env, tc.scope, func(namespace string) bool { return namespace == in || namespace == out })
			for kind, want := range tc.held {
				if got := held[kind]; !slices.Equal(got, want) {
					t.Errorf("%s held: %v, want %v", kind, got, want)
				}
			}
		})
	}
}

// managedJob is a Job labelled as captf's (owner TerraformCluster name), with also.
func managedJob(namespace, name string, also map[string]string) *batchv1.Job {
	labels := jobs.Labels(jobs.KindCluster, name, "", jobs.OpApply, 1)
	for k, v := range also {
		labels[k] = v
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "run", Image: "modules/net:v1"}},
		}}},
	}
}

// scopeHeld starts the manager's cache and the Job cache of scope and returns, by kind, the
// sorted keys of the objects they hold in the namespaces ours accepts.
func scopeHeld(ctx context.Context, t *testing.T, env *testenv.Env, scope controller.Scope, ours func(namespace string) bool) map[string][]string {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	opts := controller.ManagerOptions(ctrl.Options{Scheme: controller.NewScheme()}, scope).Cache
	opts.Scheme = controller.NewScheme()
	c, err := cache.New(env.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	jobCache, err := controller.NewJobCache(env.Config, scope)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	go func() { _ = jobCache.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("the cache did not start")
	}
	eventually(t, "the Job cache lists its Jobs", func(context.Context) (bool, error) { return jobCache.HasSynced(), nil })

	held := map[string][]string{}
	add := func(kind string, obj client.Object) {
		if obj.GetNamespace() == "" || ours(obj.GetNamespace()) {
			held[kind] = append(held[kind], client.ObjectKeyFromObject(obj).String())
		}
	}
	secrets := &metav1.PartialObjectMetadataList{}
	secrets.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("SecretList"))
	for kind, list := range map[string]client.ObjectList{
		"TerraformCluster":         &infrav1.TerraformClusterList{},
		"TerraformMachine":         &infrav1.TerraformMachineList{},
		"Cluster":                  &clusterv1.ClusterList{},
		"Secret":                   secrets,
		"TerraformClusterIdentity": &infrav1.TerraformClusterIdentityList{},
	} {
		if err := c.List(ctx, list); err != nil {
			t.Fatalf("listing %s: %v", kind, err)
		}
		if err := meta.EachListItem(list, func(o runtime.Object) error {
			obj := o.(client.Object)
			if kind != "TerraformClusterIdentity" || obj.GetName() == "scope-shared" {
				add(kind, obj)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	jobCache.Each(func(j *captfcache.CachedJob) { add("Job", j) })
	for _, keys := range held {
		slices.Sort(keys)
	}
	return held
}

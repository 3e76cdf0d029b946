package controller_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/test/capitest"
	"github.com/captf/captf/test/testenv"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{}))
}

// adminIn returns a client of the test API server with the controller's scheme, after creating
// namespace ns with it.
func adminIn(ctx context.Context, tb testing.TB, env *testenv.Env, ns string) client.Client {
	tb.Helper()
	admin, err := client.New(env.Config, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		tb.Fatal(err)
	}
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		tb.Fatal(err)
	}
	return admin
}

// TestManagerRunsAJobUnderItsShippedRBAC runs the real manager, with its cache settings, as the
// controller's ServiceAccount bound only by artifacts/controller/rbac.yaml.
func TestManagerRunsAJobUnderItsShippedRBAC(t *testing.T) {
	env := testenv.Get(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := filepath.Join(env.RepoRoot, "artifacts", "controller")
	if err := env.ApplyManifests(ctx, filepath.Join(dir, "namespace.yaml"), filepath.Join(dir, "rbac.yaml")); err != nil {
		t.Fatal(err)
	}
	asController := rest.CopyConfig(env.Config)
	asController.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:captf-system:captf-controller"}
	mgr, err := ctrl.NewManager(asController, controller.ManagerOptions(ctrl.Options{
		Scheme:  controller.NewScheme(),
		Metrics: metricsserver.Options{BindAddress: "0"},
	}, controller.Scope{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := controller.Setup(mgr, controller.Options{RunnerImage: "captf/manager:test"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}()

	admin := adminIn(ctx, t, env, "mgr")
	tc := &infrav1.TerraformCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "mgr"},
		Spec:       infrav1.TerraformClusterSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Source: infrav1.SourceSpec{Image: "modules/net:v1"}}},
	}
	if err := capitest.Own(ctx, admin, tc); err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(ctx, tc); err != nil {
		t.Fatal(err)
	}
	var job batchv1.Job
	eventually(t, "the manager creates the apply Job with its per-run Secret", func(ctx context.Context) (bool, error) {
		var list batchv1.JobList
		if err := admin.List(ctx, &list, client.InNamespace("mgr"), client.MatchingLabels(jobs.OwnerLabels(jobs.KindCluster, "web"))); err != nil || len(list.Items) != 1 {
			return false, err
		}
		job = list.Items[0]
		var secret corev1.Secret
		err := admin.Get(ctx, client.ObjectKey{Namespace: "mgr", Name: jobs.RunSecretName(job.Name)}, &secret)
		return err == nil, client.IgnoreNotFound(err)
	})
	identity := jobs.RunnerIdentityName(jobs.StateSecretSuffix("mgr", jobs.KindCluster, "web"))
	var binding rbacv1.RoleBinding
	if err := admin.Get(ctx, client.ObjectKey{Namespace: "mgr", Name: identity}, &binding); err != nil || binding.RoleRef.Kind != "Role" || binding.RoleRef.Name != identity {
		t.Fatalf("runner RoleBinding = %+v (%v)", binding, err)
	}
	if job.Spec.Template.Spec.ServiceAccountName != identity {
		t.Fatalf("the Job runs as %q, want the object's own runner identity %q", job.Spec.Template.Spec.ServiceAccountName, identity)
	}
	eventually(t, "status.activeJob names the Job", func(ctx context.Context) (bool, error) {
		err := admin.Get(ctx, client.ObjectKeyFromObject(tc), tc)
		return err == nil && tc.Status.ActiveJob != nil && tc.Status.ActiveJob.Name == job.Name, err
	})

	// The Job fails; the manager books it once and backs off.
	now := metav1.Now()
	job.Status.StartTime = &now
	job.Status.Failed = 1
	job.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", LastTransitionTime: now},
		{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", LastTransitionTime: now},
	}
	if err := admin.Status().Update(ctx, &job); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the failed Job is booked and its per-run Secret deleted", func(ctx context.Context) (bool, error) {
		if err := admin.Get(ctx, client.ObjectKeyFromObject(&job), &job); err != nil {
			return false, err
		}
		var secret corev1.Secret
		err := admin.Get(ctx, client.ObjectKey{Namespace: "mgr", Name: jobs.RunSecretName(job.Name)}, &secret)
		return job.Annotations[jobs.AnnotationBookkept] == "true" && err != nil, client.IgnoreNotFound(err)
	})
	if err := admin.Get(ctx, client.ObjectKeyFromObject(tc), tc); err != nil || tc.Status.ActiveJob != nil || tc.Status.LastRun == nil || tc.Status.LastRun.Outcome != "Failed" {
		t.Fatalf("status = %+v (%v)", tc.Status, err)
	}

	// A state Secret written while the object waits out its backoff (a minute) brings a pass
	// through the manager's watch of managed Secrets' metadata, which the RBAC must allow.
	data, err := state.Compress([]byte(`{"version":4,"serial":7,"lineage":"l1","resources":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	// The controller created the state Secret, empty and labelled as the backend labels it, so
	// the runner needs no create right.
	stateSecret := &corev1.Secret{}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: "mgr", Name: state.SecretName(jobs.StateSecretSuffix("mgr", jobs.KindCluster, "web"))}, stateSecret); err != nil {
		t.Fatal(err)
	}
	if len(stateSecret.Data) != 0 || stateSecret.Labels["tfstate"] != "true" || stateSecret.Labels[jobs.LabelManaged] != jobs.ManagedValue {
		t.Fatalf("the state Secret the controller created: labels %v, %d data keys", stateSecret.Labels, len(stateSecret.Data))
	}
	stateSecret.Data = map[string][]byte{"tfstate": data}
	if err := admin.Update(ctx, stateSecret); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the state Secret's event brings a pass that reads serial 7", func(ctx context.Context) (bool, error) {
		err := admin.Get(ctx, client.ObjectKeyFromObject(tc), tc)
		return err == nil && tc.Status.ObservedStateSerial == 7, err
	})
	// The pass remembered serial 7 under the Secret's resourceVersion; a new version is read.
	if stateSecret.Data["tfstate"], err = state.Compress([]byte(`{"version":4,"serial":8,"lineage":"l1","resources":[]}`)); err != nil {
		t.Fatal(err)
	}
	if err := admin.Update(ctx, stateSecret); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the changed state Secret is read again: serial 8", func(ctx context.Context) (bool, error) {
		err := admin.Get(ctx, client.ObjectKeyFromObject(tc), tc)
		return err == nil && tc.Status.ObservedStateSerial == 8, err
	})
}

func eventually(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

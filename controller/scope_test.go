package controller_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/runkey"
	"github.com/captf/captf/test/capitest"
	"github.com/captf/captf/test/testenv"
)

// TestAManagerWithANamespaceFlag runs the real manager with --namespace: it signs, reconciles and
// starts Jobs in that namespace only.
func TestAManagerWithANamespaceFlag(t *testing.T) {
	env := testenv.Get(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in, out, own := "ns-flag-in", "ns-flag-out", "ns-flag-controller"
	admin := adminIn(ctx, t, env, in)
	for _, ns := range []string{out, own} {
		if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range []string{in, out} {
		// A Job of a controller that did not sign yet, which the first start signs.
		if err := admin.Create(ctx, managedJob(ns, "unsigned", nil)); err != nil {
			t.Fatal(err)
		}
		createOwnedCluster(ctx, t, admin, ns, "web", nil)
	}

	mgr := scopedManager(t, env, controller.Scope{Namespace: in}, own)
	for ns, signed := range map[string]bool{in: true, out: false} {
		var job batchv1.Job
		if err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "unsigned"}, &job); err != nil {
			t.Fatal(err)
		}
		if _, has := job.Annotations[runkey.AnnotationSignature]; has != signed {
			t.Errorf("a namespace flag signs nothing of other namespaces: the Job of %s signed: %t, want %t", ns, has, signed)
		}
	}

	startManager(ctx, t, mgr)
	eventually(t, "the manager starts the Job of its namespace", func(ctx context.Context) (bool, error) {
		list, err := ownerJobs(ctx, admin, in, "web")
		return len(list) == 1, err
	})
	// Both objects were there when the manager started: had it reconciled the other one, that
	// one would have its finalizer by now.
	assertUntouched(ctx, t, admin, "a namespace flag starts no Job of another namespace", out, "web")
}

// TestAManagerWithAWatchFilter runs the real manager with --watch-filter: it reconciles the captf
// objects that carry the filter's label, whose Cluster it reads though the Cluster carries none,
// and leaves the others alone.
func TestAManagerWithAWatchFilter(t *testing.T) {
	env := testenv.Get(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := "watch-filter"
	admin := adminIn(ctx, t, env, ns)
	createOwnedCluster(ctx, t, admin, ns, "kept", map[string]string{clusterv1.WatchLabel: "team-a"})
	createOwnedCluster(ctx, t, admin, ns, "other-team", map[string]string{clusterv1.WatchLabel: "team-b"})
	createOwnedCluster(ctx, t, admin, ns, "unlabelled", nil)

	startManager(ctx, t, scopedManager(t, env, controller.Scope{WatchFilter: "team-a"}, ""))
	var job batchv1.Job
	eventually(t, "a watch filter reconciles the captf objects that carry its label, and still reads every Cluster", func(ctx context.Context) (bool, error) {
		list, err := ownerJobs(ctx, admin, ns, "kept")
		if len(list) == 1 {
			job = list[0]
		}
		return len(list) == 1, err
	})
	if job.Labels[clusterv1.WatchLabel] != "team-a" {
		t.Errorf("a Job carries its object's watch-filter label: labels %v", job.Labels)
	}
	for _, name := range []string{"other-team", "unlabelled"} {
		assertUntouched(ctx, t, admin, "a watch filter reconciles only the captf objects that carry its label", ns, name)
	}
}

// createOwnedCluster creates a TerraformCluster with labels and the Cluster that owns it, which
// carries no label of them.
func createOwnedCluster(ctx context.Context, t *testing.T, admin client.Client, namespace, name string, labels map[string]string) {
	t.Helper()
	tc := &infrav1.TerraformCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels},
		Spec:       infrav1.TerraformClusterSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Source: infrav1.SourceSpec{Image: "modules/net:v1"}}},
	}
	if err := capitest.Own(ctx, admin, tc); err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(ctx, tc); err != nil {
		t.Fatal(err)
	}
}

// scopedManager sets up the real manager with scope and the controller namespace own ("" keeps
// the run key in memory), with metrics of its own, so that several run in one test binary.
func scopedManager(t *testing.T, env *testenv.Env, scope controller.Scope, own string) ctrl.Manager {
	t.Helper()
	mgr, err := ctrl.NewManager(env.Config, controller.ManagerOptions(ctrl.Options{
		Scheme:     controller.NewScheme(),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}, scope))
	if err != nil {
		t.Fatal(err)
	}
	if err := controller.Setup(mgr, controller.Options{RunnerImage: "captf/manager:test", Registry: prometheus.NewRegistry(), Namespace: own, Scope: scope}); err != nil {
		t.Fatal(err)
	}
	return mgr
}

// startManager runs mgr until the test ends.
func startManager(ctx context.Context, t *testing.T, mgr ctrl.Manager) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
}

// ownerJobs lists the Jobs labelled as runs of the TerraformCluster namespace/name.
func ownerJobs(ctx context.Context, c client.Client, namespace, name string) ([]batchv1.Job, error) {
	var list batchv1.JobList
	err := c.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabels(jobs.OwnerLabels(jobs.KindCluster, name)))
	return list.Items, err
}

// assertUntouched fails rule unless the TerraformCluster namespace/name has neither the
// controller's finalizer nor a Job.
func assertUntouched(ctx context.Context, t *testing.T, c client.Client, rule, namespace, name string) {
	t.Helper()
	var tc infrav1.TerraformCluster
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &tc); err != nil {
		t.Fatal(err)
	}
	list, err := ownerJobs(ctx, c, namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(tc.Finalizers) > 0 || len(list) > 0 {
		t.Errorf("%s: %s/%s has finalizers %v and %d Jobs", rule, namespace, name, tc.Finalizers, len(list))
	}
}

// TestAScopeIsValidated checks the flags' values before the manager starts.
func TestAScopeIsValidated(t *testing.T) {
	for _, tc := range []struct {
		rule  string
		scope controller.Scope
		valid bool
	}{
		{"no flag is everything", controller.Scope{}, true},
		{"a namespace name and a label value are accepted", controller.Scope{Namespace: "team-a", WatchFilter: "team-a.v1"}, true},
		{"a namespace flag that cannot name a namespace is refused", controller.Scope{Namespace: "Team_A"}, false},
		{"a watch filter that cannot be a label value is refused", controller.Scope{WatchFilter: "team a"}, false},
	} {
		if err := tc.scope.Validate(); (err == nil) != tc.valid {
			t.Errorf("%s: %v", tc.rule, err)
		}
	}
}

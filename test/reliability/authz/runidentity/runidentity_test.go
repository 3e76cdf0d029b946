// Package runidentity runs real applies through the whole system (test/system: controller, node
// agent, runner, OpenTofu) and then acts as the identity a run's pod had: it keeps its own state
// and lock, and every other Secret of the namespace is out of its reach — another object's
// state and lock, a Cluster API kubeconfig, a plan key, a per-run Secret, the durable inputs —
// as are lists, watches and creates of Secrets.
package runidentity

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/test/system"
)

func TestMain(m *testing.M) {
	os.Exit(system.Main(m, system.Options{}))
}

// applyJob waits for the first apply Job of a cluster to succeed and returns it.
func applyJob(s *system.Suite, name string) batchv1.Job {
	s.T.Helper()
	var job batchv1.Job
	s.Eventually("the first apply of "+name+" succeeds", 3*time.Minute, func(ctx context.Context) (bool, error) {
		var list batchv1.JobList
		if err := s.C.List(ctx, &list, client.InNamespace(s.NS), client.MatchingLabels(jobs.OwnerLabels(jobs.KindCluster, name))); err != nil {
			return false, err
		}
		for _, j := range list.Items {
			if jobs.OpOf(&j) == jobs.OpApply && j.Status.Succeeded > 0 {
				job = j
				return true, nil
			}
		}
		return false, nil
	})
	return job
}

func TestARunReachesOnlyItsOwnState(t *testing.T) {
	s := system.NewSuite(t, "runid")
	kube := kubernetes.NewForConfigOrDie(s.Sys.Env.Config)
	s.Cluster("own", `{"name":"own"}`)
	other := s.Cluster("other", `{"name":"other"}`, func(c *infrav1.TerraformCluster) { c.Spec.ApplyPolicy = infrav1.ApplyPolicyManual })
	ownJob, otherJob := applyJob(s, "own"), applyJob(s, "other")
	// A plan of the other cluster gives it a plan key.
	s.PatchVariables(other, `{"name":"other","size":"large"}`)
	planKey := jobs.PlanKeySecretName(jobs.KindCluster, "other")
	s.Eventually("the other cluster's plan key exists", 2*time.Minute, func(ctx context.Context) (bool, error) {
		_, err := kube.CoreV1().Secrets(s.NS).Get(ctx, planKey, metav1.GetOptions{})
		return err == nil, client.IgnoreNotFound(err)
	})
	kubeconfig := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "own-kubeconfig", Namespace: s.NS}, StringData: map[string]string{"value": "apiVersion: v1"}}
	if err := s.C.Create(s.Ctx, kubeconfig); err != nil {
		t.Fatal(err)
	}

	ownSuffix := jobs.StateSecretSuffix(s.NS, jobs.KindCluster, "own")
	otherSuffix := jobs.StateSecretSuffix(s.NS, jobs.KindCluster, "other")
	sa := ownJob.Spec.Template.Spec.ServiceAccountName
	if sa != jobs.RunnerIdentityName(ownSuffix) || otherJob.Spec.Template.Spec.ServiceAccountName == sa {
		t.Fatalf("the runs' identities are %q and %q; want one per object", sa, otherJob.Spec.Template.Spec.ServiceAccountName)
	}
	// Every Secret named here exists, so a denial is RBAC's and not a missing object.
	for _, name := range []string{state.SecretName(ownSuffix), state.SecretName(otherSuffix), kubeconfig.Name, planKey, jobs.InputsSecretName(jobs.KindCluster, "other"), jobs.InputsSecretName(jobs.KindCluster, "own")} {
		if _, err := kube.CoreV1().Secrets(s.NS).Get(s.Ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatalf("Secret %s: %v", name, err)
		}
	}

	// Both objects have a state part, as an object whose state outgrew one Secret has (the
	// controller makes them while a run asks, which the workspace and e2e suites show); the
	// controller grants each object's parts to that object's run.
	ownPart, otherPart := jobs.StatePartName(ownSuffix, "a", 0), jobs.StatePartName(otherSuffix, "a", 0)
	for name, owner := range map[string]string{ownPart: "own", otherPart: "other"} {
		labels := jobs.OwnerLabels(jobs.KindCluster, owner)
		labels[jobs.LabelStatePart] = "true"
		if err := s.C.Create(s.Ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.NS, Labels: labels}}); err != nil {
			t.Fatal(err)
		}
	}

	// The identity the pod had, as the API server authenticates a pod's ServiceAccount token.
	config := rest.CopyConfig(s.Sys.Env.Config)
	config.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + s.NS + ":" + sa,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + s.NS, "system:authenticated"},
	}
	run := kubernetes.NewForConfigOrDie(config)
	secrets, leases := run.CoreV1().Secrets(s.NS), run.CoordinationV1().Leases(s.NS)
	asAdmin := func(name string) *corev1.Secret {
		secret, err := kube.CoreV1().Secrets(s.NS).Get(s.Ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return secret
	}
	leaseAsAdmin := func(name string) *coordinationv1.Lease {
		lease, err := kube.CoordinationV1().Leases(s.NS).Get(s.Ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return lease
	}
	ctx := s.Ctx
	s.Eventually("the controller grants the run its state parts", time.Minute, func(ctx context.Context) (bool, error) {
		_, err := secrets.Get(ctx, ownPart, metav1.GetOptions{})
		return err == nil, nil
	})
	tests := []struct {
		name    string
		do      func() error
		allowed bool
	}{
		{"its own state is readable", func() error {
			_, err := secrets.Get(ctx, state.SecretName(ownSuffix), metav1.GetOptions{})
			return err
		}, true},
		{"its own state is writable", func() error {
			_, err := secrets.Update(ctx, asAdmin(state.SecretName(ownSuffix)), metav1.UpdateOptions{})
			return err
		}, true},
		{"its own lock is readable", func() error {
			_, err := leases.Get(ctx, state.LockLeaseName(ownSuffix), metav1.GetOptions{})
			return err
		}, true},
		{"its own lock is writable", func() error {
			_, err := leases.Update(ctx, leaseAsAdmin(state.LockLeaseName(ownSuffix)), metav1.UpdateOptions{})
			return err
		}, true},
		{"its own state part is readable", func() error {
			_, err := secrets.Get(ctx, ownPart, metav1.GetOptions{})
			return err
		}, true},
		{"its own state part is writable", func() error {
			_, err := secrets.Update(ctx, asAdmin(ownPart), metav1.UpdateOptions{})
			return err
		}, true},
		{"a state part cannot be created, not even of its own names", func() error {
			_, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: jobs.StatePartName(ownSuffix, "a", jobs.MaxStateParts-1)}}, metav1.CreateOptions{})
			return err
		}, false},
		{"another object's state part is not readable", func() error {
			_, err := secrets.Get(ctx, otherPart, metav1.GetOptions{})
			return err
		}, false},
		{"another object's state part is not writable", func() error {
			_, err := secrets.Update(ctx, asAdmin(otherPart), metav1.UpdateOptions{})
			return err
		}, false},
		{"another object's state is not readable", func() error {
			_, err := secrets.Get(ctx, state.SecretName(otherSuffix), metav1.GetOptions{})
			return err
		}, false},
		{"another object's state is not writable", func() error {
			_, err := secrets.Update(ctx, asAdmin(state.SecretName(otherSuffix)), metav1.UpdateOptions{})
			return err
		}, false},
		{"another object's lock is not writable", func() error {
			_, err := leases.Update(ctx, leaseAsAdmin(state.LockLeaseName(otherSuffix)), metav1.UpdateOptions{})
			return err
		}, false},
		{"a Cluster API <cluster>-kubeconfig Secret is not readable", func() error {
			_, err := secrets.Get(ctx, kubeconfig.Name, metav1.GetOptions{})
			return err
		}, false},
		{"a plan key is not readable", func() error {
			_, err := secrets.Get(ctx, planKey, metav1.GetOptions{})
			return err
		}, false},
		{"another run's per-run Secret is not readable", func() error {
			_, err := secrets.Get(ctx, jobs.RunSecretName(otherJob.Name), metav1.GetOptions{})
			return err
		}, false},
		{"another run's per-run Secret cannot be written before it is mounted", func() error {
			_, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: jobs.RunSecretName(otherJob.Name + "-next")}}, metav1.CreateOptions{})
			return err
		}, false},
		{"its own durable inputs are not readable (they are mounted, never fetched)", func() error {
			_, err := secrets.Get(ctx, jobs.InputsSecretName(jobs.KindCluster, "own"), metav1.GetOptions{})
			return err
		}, false},
		{"Secrets cannot be listed", func() error {
			_, err := secrets.List(ctx, metav1.ListOptions{LabelSelector: "tfstate=true"})
			return err
		}, false},
		{"Secrets cannot be watched", func() error {
			w, err := secrets.Watch(ctx, metav1.ListOptions{})
			if err == nil {
				w.Stop()
			}
			return err
		}, false},
		{"its own state cannot be deleted", func() error {
			return secrets.Delete(ctx, state.SecretName(ownSuffix), metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		}, false},
		{"another object's lock cannot be deleted", func() error {
			return leases.Delete(ctx, state.LockLeaseName(otherSuffix), metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.do()
			switch {
			case tt.allowed && err != nil:
				t.Fatalf("denied: %v", err)
			case !tt.allowed && !apierrors.IsForbidden(err):
				t.Fatalf("got %v, want Forbidden", err)
			}
		})
	}
	t.Logf("FIGURE run identity: %d requests as %s", len(tests), fmt.Sprint(config.Impersonate.UserName))
}

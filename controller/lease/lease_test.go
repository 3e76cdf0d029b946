package lease_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/captf/captf/controller"
	"github.com/captf/captf/controller/lease"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/test/testenv"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{SkipCRDs: true}))
}

var n atomic.Int32

func setup(t *testing.T) (client.Client, string) {
	t.Helper()
	c, err := client.New(testenv.Get(t).Config, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("lease-%d", n.Add(1))
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return c, ns
}

func request(ns, job string) lease.Request {
	return lease.Request{Namespace: ns, Name: "captf-run-x", Job: job, Op: jobs.OpApply, Labels: jobs.OwnerLabels(jobs.KindCluster, "web"), DeadlineSeconds: 60}
}

func holderIs(h lease.Holder) lease.HolderFunc {
	return func(context.Context, string) (lease.Holder, error) { return h, nil }
}

func TestAcquire(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	for _, tc := range []struct {
		rule     string
		previous string
		holder   lease.Holder
		after    time.Duration
		want     bool
	}{
		{"a missing Lease is created", "", lease.Holder{}, 0, true},
		{"the same holder takes it again", "job-a", lease.Holder{Exists: true}, 0, true},
		{"a running holder keeps it", "job-b", lease.Holder{Exists: true, PodsRunning: true}, 5 * time.Minute, false},
		{"a finished holder whose pods stopped gives it up", "job-b", lease.Holder{Exists: true, Finished: true}, 0, true},
		{"a finished holder with a pod still terminating keeps it", "job-b", lease.Holder{Exists: true, Finished: true, PodsRunning: true}, 0, false},
		{"an unfinished holder keeps it", "job-b", lease.Holder{Exists: true}, 5 * time.Minute, false},
		{"an absent holder keeps it within the grace", "job-b", lease.Holder{}, 30 * time.Second, false},
		{"an absent holder loses it after the grace", "job-b", lease.Holder{}, lease.Grace + time.Second, true},
		{"any holder loses it after the backstop", "job-b", lease.Holder{Exists: true, PodsRunning: true}, (60+900)*time.Second + time.Second, true},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			c, ns := setup(t)
			ctx := context.Background()
			if tc.previous != "" {
				if ok, err := lease.Acquire(ctx, c, request(ns, tc.previous), holderIs(lease.Holder{}), now); !ok || err != nil {
					t.Fatalf("first acquire: %v %v", ok, err)
				}
			}
			got, err := lease.Acquire(ctx, c, request(ns, "job-a"), holderIs(tc.holder), now.Add(tc.after))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("acquired = %v, want %v", got, tc.want)
			}
			var l coordinationv1.Lease
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "captf-run-x"}, &l); err != nil {
				t.Fatal(err)
			}
			wantHolder := tc.previous
			if tc.want {
				wantHolder = "job-a"
			}
			if ptr.Deref(l.Spec.HolderIdentity, "") != wantHolder {
				t.Fatalf("holder = %s, want %s", ptr.Deref(l.Spec.HolderIdentity, ""), wantHolder)
			}
			if l.Labels[jobs.LabelManaged] != jobs.ManagedValue || l.Labels[lease.LabelLease] != "run" || *l.Spec.LeaseDurationSeconds != 60+900 {
				t.Fatalf("lease = %+v", l)
			}
		})
	}
}

func TestReleaseOnlyByItsHolder(t *testing.T) {
	c, ns := setup(t)
	ctx := context.Background()
	if ok, err := lease.Acquire(ctx, c, request(ns, "job-a"), holderIs(lease.Holder{}), time.Now()); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if err := lease.Release(ctx, c, ns, "captf-run-x", "job-b"); err != nil {
		t.Fatal(err)
	}
	var l coordinationv1.Lease
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "captf-run-x"}, &l); err != nil {
		t.Fatal("another holder's release deleted the Lease")
	}
	if err := lease.Release(ctx, c, ns, "captf-run-x", "job-a"); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "captf-run-x"}, &l); err == nil {
		t.Fatal("the holder's release left the Lease")
	}
	if err := lease.Release(ctx, c, ns, "captf-run-x", "job-a"); err != nil {
		t.Fatalf("releasing a Lease that is gone: %v", err)
	}
}

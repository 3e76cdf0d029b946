package metrics

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
)

// clusterLister is a cache holding clusters; it records the kinds listed and fails when told.
type clusterLister struct {
	client.Reader
	clusters []infrav1.TerraformCluster
	err      error
	listed   []string
}

func (l *clusterLister) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	if l.err != nil {
		return l.err
	}
	switch list := list.(type) {
	case *infrav1.TerraformClusterList:
		l.listed = append(l.listed, "TerraformCluster")
		list.Items = l.clusters
	case *infrav1.TerraformMachineList:
		l.listed = append(l.listed, "TerraformMachine")
	case *infrav1.TerraformMachinePoolList:
		l.listed = append(l.listed, "TerraformMachinePool")
	}
	return nil
}

func TestPlansAwaitingApprovalFromTheCache(t *testing.T) {
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	cluster := func(name string, status metav1.ConditionStatus, reason string, since time.Time) infrav1.TerraformCluster {
		c := infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
		c.Status.Conditions = []metav1.Condition{{Type: conditions.ApplyJobSucceeded, Status: status, Reason: reason, LastTransitionTime: metav1.NewTime(since)}}
		return c
	}
	tests := []struct {
		name     string
		clusters []infrav1.TerraformCluster
		err      error
		want     map[string]PlanWaits
	}{
		{
			name: "clusters with no plan waiting report none for their kind",
			clusters: []infrav1.TerraformCluster{
				cluster("a", metav1.ConditionTrue, conditions.ReasonApplySucceeded, now.Add(-time.Hour)),
				{ObjectMeta: metav1.ObjectMeta{Name: "new", Namespace: "ns"}},
			},
			want: map[string]PlanWaits{"TerraformCluster": {}},
		},
		{
			name: "waiting plans are counted and the oldest gives the wait",
			clusters: []infrav1.TerraformCluster{
				cluster("a", metav1.ConditionUnknown, conditions.ReasonPlanAwaitingApproval, now.Add(-time.Minute)),
				cluster("b", metav1.ConditionUnknown, conditions.ReasonPlanChanged, now.Add(-2*time.Hour)),
				cluster("c", metav1.ConditionTrue, conditions.ReasonApplySucceeded, now.Add(-48*time.Hour)),
			},
			want: map[string]PlanWaits{"TerraformCluster": {Count: 2, Longest: 2 * time.Hour}},
		},
		{
			name: "a cache that fails tells nothing",
			err:  errors.New("cache not synced"),
			want: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cache := &clusterLister{clusters: tt.clusters, err: tt.err}
			got := PlansAwaitingApproval(cache, clocktesting.NewFakePassiveClock(now))()
			if len(got) != len(tt.want) || (tt.want == nil) != (got == nil) {
				t.Fatalf("waits = %v, want %v", got, tt.want)
			}
			for kind, w := range tt.want {
				if got[kind] != w {
					t.Errorf("waits of %s = %+v, want %+v", kind, got[kind], w)
				}
			}
		})
	}
}

// TestOnlyKindsWithAnApplyPolicyAreListed: machines cannot wait for approval, and there may be
// many, so a scrape never lists them.
func TestOnlyKindsWithAnApplyPolicyAreListed(t *testing.T) {
	cache := &clusterLister{}
	PlansAwaitingApproval(cache, clocktesting.NewFakePassiveClock(time.Now()))()
	if len(cache.listed) != 1 || cache.listed[0] != "TerraformCluster" {
		t.Fatalf("listed %v, want only TerraformCluster", cache.listed)
	}
}

package metrics

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
)

// PlansAwaitingApproval reads, from the manager's cache, the plans that wait for approval of
// every kind whose objects can have one (those with spec.applyPolicy), for the
// captf_plans_awaiting_approval and captf_plan_approval_wait_seconds gauges.
func PlansAwaitingApproval(cache client.Reader, clk clock.PassiveClock) func() map[string]PlanWaits {
	return func() map[string]PlanWaits {
		waits := map[string]PlanWaits{}
		for _, kind := range infrav1.Kinds {
			if _, planned := kind.New().(infrav1.Planned); !planned {
				continue
			}
			list := kind.NewList()
			if err := cache.List(context.Background(), list); err != nil {
				return nil
			}
			waits[kind.Kind] = planWaits(list, clk)
		}
		return waits
	}
}

// planWaits counts the objects of list whose plan waits for approval, and the longest wait.
func planWaits(list client.ObjectList, clk clock.PassiveClock) PlanWaits {
	var w PlanWaits
	now := clk.Now()
	_ = meta.EachListItem(list, func(obj runtime.Object) error {
		ws, ok := obj.(infrav1.Workspace)
		if !ok {
			return nil
		}
		if since, waiting := conditions.AwaitingApproval(ws.WorkspaceStatus().Conditions); waiting {
			w.Count++
			w.Longest = max(w.Longest, now.Sub(since))
		}
		return nil
	})
	return w
}

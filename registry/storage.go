package registry

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/captf/captf/apis/runs"
)

// Resource names, short names and the category of the API.
const (
	// RunsResource is the resource of runs.
	RunsResource = "runs"
	// PlansResource is the resource of plans.
	PlansResource = "plans"
	// ApprovalSubresource is the subresource that approves a plan.
	ApprovalSubresource = "approval"
	// Category groups runs and plans with the captf CRDs: kubectl get terraform.
	Category = "terraform"
)

// RunREST serves runs: get, list and watch, computed from the Source. It stores nothing.
type RunREST struct {
	tableConvertor
	src *Source
}

var (
	_ rest.Storage              = &RunREST{}
	_ rest.Scoper               = &RunREST{}
	_ rest.KindProvider         = &RunREST{}
	_ rest.SingularNameProvider = &RunREST{}
	_ rest.ShortNamesProvider   = &RunREST{}
	_ rest.CategoriesProvider   = &RunREST{}
	_ rest.Getter               = &RunREST{}
	_ rest.Lister               = &RunREST{}
	_ rest.Watcher              = &RunREST{}
	_ rest.TableConvertor       = &RunREST{}
)

// NewRunREST returns the storage of runs over src.
func NewRunREST(src *Source) *RunREST {
	return &RunREST{src: src, tableConvertor: tableConvertor{columns: runColumns, row: runRow, now: src.now}}
}

// New implements rest.Storage.
func (*RunREST) New() runtime.Object { return &runs.Run{} }

// Destroy implements rest.Storage; the Source outlives the storage.
func (*RunREST) Destroy() {}

// NamespaceScoped implements rest.Scoper.
func (*RunREST) NamespaceScoped() bool { return true }

// Kind implements rest.KindProvider.
func (*RunREST) Kind() string { return "Run" }

// GetSingularName implements rest.SingularNameProvider.
func (*RunREST) GetSingularName() string { return "run" }

// ShortNames implements rest.ShortNamesProvider.
func (*RunREST) ShortNames() []string { return []string{"tfrun"} }

// Categories implements rest.CategoriesProvider.
func (*RunREST) Categories() []string { return []string{Category} }

// NewList implements rest.Lister.
func (*RunREST) NewList() runtime.Object { return &runs.RunList{} }

// Get implements rest.Getter: the run of the Job with this name in the request's namespace.
func (s *RunREST) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	if err := s.src.ready(); err != nil {
		return nil, err
	}
	run, ok := s.src.getRun(genericapirequest.NamespaceValue(ctx), name)
	if !ok {
		return nil, apierrors.NewNotFound(runs.Resource(RunsResource), name)
	}
	return run, nil
}

// List implements rest.Lister: every selected run, computed from the current records at the
// list's version (see listVersionOf).
func (s *RunREST) List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error) {
	items, meta, err := listViews(ctx, s.src, options, s.src.runItems)
	if err != nil {
		return nil, err
	}
	return &runs.RunList{ListMeta: meta, Items: items}, nil
}

// Watch implements rest.Watcher; see watchFor.
func (s *RunREST) Watch(ctx context.Context, options *metainternalversion.ListOptions) (watch.Interface, error) {
	sel := selectionOf(genericapirequest.NamespaceValue(ctx), options)
	return watchFor(ctx, s.src, s.src.runHub, options, func() []runtime.Object {
		items := s.src.listRuns(sel)
		out := make([]runtime.Object, len(items))
		for i := range items {
			out[i] = items[i]
		}
		return out
	})
}

// PlanREST serves plans: get, list and watch, computed from the Source. It stores nothing.
type PlanREST struct {
	tableConvertor
	src *Source
}

var (
	_ rest.Storage              = &PlanREST{}
	_ rest.Scoper               = &PlanREST{}
	_ rest.KindProvider         = &PlanREST{}
	_ rest.SingularNameProvider = &PlanREST{}
	_ rest.ShortNamesProvider   = &PlanREST{}
	_ rest.CategoriesProvider   = &PlanREST{}
	_ rest.Getter               = &PlanREST{}
	_ rest.Lister               = &PlanREST{}
	_ rest.Watcher              = &PlanREST{}
	_ rest.TableConvertor       = &PlanREST{}
)

// NewPlanREST returns the storage of plans over src.
func NewPlanREST(src *Source) *PlanREST {
	return &PlanREST{src: src, tableConvertor: tableConvertor{columns: planColumns, row: planRow, now: src.now}}
}

// New implements rest.Storage.
func (*PlanREST) New() runtime.Object { return &runs.Plan{} }

// Destroy implements rest.Storage; the Source outlives the storage.
func (*PlanREST) Destroy() {}

// NamespaceScoped implements rest.Scoper.
func (*PlanREST) NamespaceScoped() bool { return true }

// Kind implements rest.KindProvider.
func (*PlanREST) Kind() string { return "Plan" }

// GetSingularName implements rest.SingularNameProvider.
func (*PlanREST) GetSingularName() string { return "plan" }

// ShortNames implements rest.ShortNamesProvider.
func (*PlanREST) ShortNames() []string { return []string{"tfplan"} }

// Categories implements rest.CategoriesProvider.
func (*PlanREST) Categories() []string { return []string{Category} }

// NewList implements rest.Lister.
func (*PlanREST) NewList() runtime.Object { return &runs.PlanList{} }

// Get implements rest.Getter: the plan of the Job with this name, when it carries one.
func (s *PlanREST) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	if err := s.src.ready(); err != nil {
		return nil, err
	}
	plan, ok := s.src.getPlan(genericapirequest.NamespaceValue(ctx), name)
	if !ok {
		return nil, apierrors.NewNotFound(runs.Resource(PlansResource), name)
	}
	return plan, nil
}

// List implements rest.Lister, like RunREST.List.
func (s *PlanREST) List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error) {
	items, meta, err := listViews(ctx, s.src, options, s.src.planItems)
	if err != nil {
		return nil, err
	}
	return &runs.PlanList{ListMeta: meta, Items: items}, nil
}

// listViews lists the runs or plans a request selects: every one, computed by items from the
// current records, with the list metadata of a whole list, which holds only its
// resourceVersion (see listVersionOf).
func listViews[T any](ctx context.Context, src *Source, options *metainternalversion.ListOptions, items func(selection) []T) ([]T, metav1.ListMeta, error) {
	if err := src.ready(); err != nil {
		return nil, metav1.ListMeta{}, err
	}
	// The version first: a watch from it then misses nothing the list did not show.
	rv, err := src.listVersionOf(ctx, options)
	if err != nil {
		return nil, metav1.ListMeta{}, err
	}
	sel := selectionOf(genericapirequest.NamespaceValue(ctx), options)
	return items(sel), metav1.ListMeta{ResourceVersion: rv}, nil
}

// Watch implements rest.Watcher; see watchFor.
func (s *PlanREST) Watch(ctx context.Context, options *metainternalversion.ListOptions) (watch.Interface, error) {
	sel := selectionOf(genericapirequest.NamespaceValue(ctx), options)
	return watchFor(ctx, s.src, s.src.planHub, options, func() []runtime.Object {
		items := s.src.listPlans(sel)
		out := make([]runtime.Object, len(items))
		for i := range items {
			out[i] = items[i]
		}
		return out
	})
}

// watchFor starts a watch on h. With resourceVersion "" or "0", or sendInitialEvents, the
// current objects come first as ADDED (with sendInitialEvents, followed by the
// initial-events-end bookmark); with any other resourceVersion the events after it are
// replayed, or 410 Gone returned when the server no longer has them. Events follow the Jobs:
// a run's resourceVersion is its Job's.
func watchFor(ctx context.Context, src *Source, h *hub, options *metainternalversion.ListOptions, list func() []runtime.Object) (watch.Interface, error) {
	if err := src.ready(); err != nil {
		return nil, err
	}
	sel := selectionOf(genericapirequest.NamespaceValue(ctx), options)
	rv := ""
	var sendInitial, bookmarks bool
	if options != nil {
		rv = options.ResourceVersion
		sendInitial = options.SendInitialEvents != nil && *options.SendInitialEvents
		bookmarks = options.AllowWatchBookmarks
	}
	if options != nil && options.SendInitialEvents != nil && !sendInitial && (rv == "" || rv == "0") {
		// sendInitialEvents=false from "now": nothing to replay, only live events.
		rv = src.listRV()
	}
	var initial func() []runtime.Object
	if sendInitial || rv == "" || rv == "0" {
		initial = list
	}
	w, err := h.watch(sel, rv, initial, src.listRV, sendInitial && bookmarks)
	if err != nil {
		return nil, err
	}
	go func() {
		select {
		case <-ctx.Done():
			w.Stop()
		case <-w.done:
		}
	}()
	return w, nil
}

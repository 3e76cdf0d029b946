package registry

import (
	"context"
	"reflect"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/utils/ptr"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/apis/runs"
	"github.com/captf/captf/jobs"
)

// newFixture is a small history: web has a success, two failed applies in backoff and a
// running drift check; db (another namespace) has a plan awaiting approval.
func newFixture(t *testing.T) (*Source, map[string]string) {
	t.Helper()
	ok := newJob("team-a", "web", jobs.OpApply, 1, succeeded(t0.Add(-50*time.Minute)))
	f1 := newJob("team-a", "web", jobs.OpApply, 2, failed(t0.Add(-20*time.Minute)))
	f2 := newJob("team-a", "web", jobs.OpApply, 3, failed(t0.Add(-time.Minute)), withResult(jobs.Summary{Error: &jobs.ErrorSummary{Kind: jobs.ErrorKindStep, Step: "apply"}}))
	drift := newJob("team-a", "web", jobs.OpDrift, 1, started(t0.Add(-30*time.Second)))
	plan := newJob("team-b", "db", jobs.OpPlan, 1, succeeded(t0.Add(-5*time.Minute)), withResult(jobs.Summary{Plan: &jobs.PlanSummary{Hash: planHash, Add: 2}}))
	db := cluster("team-b", "db", nil, &infrav1.PlanPreview{InputsHash: inputsHash, PlanHash: planHash, Job: plan.Name}, nil)
	web := cluster("team-a", "web", ptr.To[int32](5), nil, nil)
	src := newTestSource(t, ok, f1, f2, drift, plan, db, web)
	return src, map[string]string{"ok": ok.Name, "f1": f1.Name, "f2": f2.Name, "drift": drift.Name, "plan": plan.Name}
}

func listOptions(label, field string) *metainternalversion.ListOptions {
	opts := &metainternalversion.ListOptions{}
	if label != "" {
		opts.LabelSelector = labels.SelectorFromSet(labels.Set{jobs.LabelOp: label})
	}
	if field != "" {
		opts.FieldSelector = fields.ParseSelectorOrDie(field)
	}
	return opts
}

func names[T any](items []T, name func(T) string) []string {
	var out []string
	for _, i := range items {
		out = append(out, name(i))
	}
	return out
}

func TestListRunsSelects(t *testing.T) {
	src, n := newFixture(t)
	storage := NewRunREST(src)
	tests := []struct {
		name      string
		namespace string
		opts      *metainternalversion.ListOptions
		want      []string
	}{
		{name: "all namespaces, sorted by namespace and name", opts: listOptions("", ""), want: []string{n["ok"], n["f1"], n["f2"], n["drift"], n["plan"]}},
		{name: "one namespace", namespace: "team-b", opts: listOptions("", ""), want: []string{n["plan"]}},
		{name: "a label selector on the op label", opts: listOptions("drift", ""), want: []string{n["drift"]}},
		{name: "spec.operation", opts: listOptions("", "spec.operation=apply"), want: []string{n["ok"], n["f1"], n["f2"]}},
		{name: "spec.target.name", opts: listOptions("", "spec.target.name=db"), want: []string{n["plan"]}},
		{name: "status.phase", opts: listOptions("", "status.phase=Failed"), want: []string{n["f1"], n["f2"]}},
		{name: "a negated field selector", opts: listOptions("", "status.phase!=Failed,metadata.namespace=team-a"), want: []string{n["ok"], n["drift"]}},
		{name: "metadata.name", opts: listOptions("", "metadata.name="+n["f2"]), want: []string{n["f2"]}},
		{name: "labels and fields together", opts: listOptions("apply", "status.phase=Succeeded"), want: []string{n["ok"]}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := genericapirequest.WithNamespace(context.Background(), tt.namespace)
			obj, err := storage.List(ctx, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			list := obj.(*runs.RunList)
			got := names(list.Items, func(r runs.Run) string { return r.Name })
			if !equalStrings(got, tt.want) {
				t.Errorf("runs = %v, want %v", got, tt.want)
			}
			if list.ResourceVersion == "" || list.ResourceVersion == "0" {
				t.Errorf("list resourceVersion = %q", list.ResourceVersion)
			}
		})
	}
}

func TestListPlansHoldsOnlyPlans(t *testing.T) {
	src, n := newFixture(t)
	obj, err := NewPlanREST(src).List(context.Background(), listOptions("", ""))
	if err != nil {
		t.Fatal(err)
	}
	list := obj.(*runs.PlanList)
	if got := names(list.Items, func(p runs.Plan) string { return p.Name }); !equalStrings(got, []string{n["plan"]}) {
		t.Fatalf("plans = %v", got)
	}
	if p := list.Items[0]; p.Status.Phase != runs.PlanPhaseAwaitingApproval || p.Status.Add != 2 {
		t.Errorf("plan status = %+v", p.Status)
	}
	obj, err = NewPlanREST(src).List(context.Background(), listOptions("", "status.phase=Approved"))
	if err != nil || len(obj.(*runs.PlanList).Items) != 0 {
		t.Errorf("status.phase=Approved: %v, %v", obj, err)
	}
}

func TestGetAnswersNotFound(t *testing.T) {
	src, n := newFixture(t)
	tests := []struct {
		name      string
		get       func(ctx context.Context, name string, o *metav1.GetOptions) (runtime.Object, error)
		namespace string
		object    string
		wantErr   func(error) bool
	}{
		{name: "a run", get: NewRunREST(src).Get, namespace: "team-a", object: n["f2"]},
		{name: "a run in another namespace is not found", get: NewRunREST(src).Get, namespace: "team-b", object: n["f2"], wantErr: apierrors.IsNotFound},
		{name: "an unknown run is not found", get: NewRunREST(src).Get, namespace: "team-a", object: "nope", wantErr: apierrors.IsNotFound},
		{name: "a plan", get: NewPlanREST(src).Get, namespace: "team-b", object: n["plan"]},
		{name: "a run that carries no plan is no plan", get: NewPlanREST(src).Get, namespace: "team-a", object: n["f2"], wantErr: apierrors.IsNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj, err := tt.get(genericapirequest.WithNamespace(context.Background(), tt.namespace), tt.object, &metav1.GetOptions{})
			if tt.wantErr != nil {
				if !tt.wantErr(err) {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m := obj.(metav1.Object); m.GetName() != tt.object {
				t.Errorf("name = %s", m.GetName())
			}
		})
	}
}

func TestUnsyncedCacheIsUnavailable(t *testing.T) {
	src := newSource(newJobStore(), nil, nil)
	_, err := NewRunREST(src).List(context.Background(), listOptions("", ""))
	if !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("List before sync: err = %v, want 503", err)
	}
	_, err = NewPlanREST(src).Watch(context.Background(), listOptions("", ""))
	if !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("Watch before sync: err = %v, want 503", err)
	}
}

func TestRunTable(t *testing.T) {
	src, n := newFixture(t)
	storage := NewRunREST(src)
	obj, err := storage.List(genericapirequest.WithNamespace(context.Background(), "team-a"), listOptions("", ""))
	if err != nil {
		t.Fatal(err)
	}
	first := obj.(*runs.RunList).Items[0]
	table, err := storage.ConvertToTable(context.Background(), obj, nil)
	if err != nil {
		t.Fatal(err)
	}
	var header []string
	for _, c := range table.ColumnDefinitions {
		if c.Priority == 0 {
			header = append(header, c.Name)
		}
	}
	if want := []string{"Name", "Target", "Op", "Attempt", "Retry", "Phase", "Age", "Duration", "Next-Retry"}; !equalStrings(header, want) {
		t.Errorf("columns = %v, want %v", header, want)
	}
	rows := map[string][]any{}
	for _, r := range table.Rows {
		rows[r.Cells[0].(string)] = r.Cells
		if r.Object.Object == nil {
			t.Errorf("row %v has no object", r.Cells[0])
		}
	}
	tests := []struct {
		run  string
		want []any
	}{
		{run: n["ok"], want: []any{n["ok"], "TerraformCluster/web", "apply", int64(1), int64(1), "Succeeded", "59m", "60s", none, "NewestSuccess", none}},
		{run: n["f1"], want: []any{n["f1"], "TerraformCluster/web", "apply", int64(2), int64(1), "Failed", "58m", "60s", none, "WithinLimit", none}},
		{run: n["f2"], want: []any{n["f2"], "TerraformCluster/web", "apply", int64(3), int64(2), "Failed", "57m", "60s", "60s", "UnresolvedFailure", "step/apply"}},
		{run: n["drift"], want: []any{n["drift"], "TerraformCluster/web", "drift", int64(1), int64(1), "Running", "59m", "30s", none, "Running", none}},
	}
	for _, tt := range tests {
		if got := rows[tt.run]; !equalAny(got, tt.want) {
			t.Errorf("row of %s = %v, want %v", tt.run, got, tt.want)
		}
	}
	if table.ResourceVersion != obj.(*runs.RunList).ResourceVersion {
		t.Errorf("table resourceVersion = %q", table.ResourceVersion)
	}
	one, err := storage.ConvertToTable(context.Background(), &first, &metav1.TableOptions{NoHeaders: true})
	if err != nil || len(one.Rows) != 1 || one.ColumnDefinitions != nil {
		t.Errorf("single object table = %+v, %v", one, err)
	}
}

// TestATableListCarriesWholeObjectsOnlyWhenAsked: rows of a listed Table carry each run's
// metadata (what the server sends by default) and let go of the list, so a whole list's runs
// can be collected while the Table is encoded; includeObject=Object keeps the runs.
func TestATableListCarriesWholeObjectsOnlyWhenAsked(t *testing.T) {
	tests := []struct {
		name          string
		includeObject metav1.IncludeObjectPolicy
		wantWhole     bool
	}{
		{name: "default sends metadata", includeObject: "", wantWhole: false},
		{name: "Metadata sends metadata", includeObject: metav1.IncludeMetadata, wantWhole: false},
		{name: "None sends metadata the server then drops", includeObject: metav1.IncludeNone, wantWhole: false},
		{name: "Object sends the runs", includeObject: metav1.IncludeObject, wantWhole: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, _ := newFixture(t)
			storage := NewRunREST(src)
			obj, err := storage.List(genericapirequest.WithNamespace(context.Background(), "team-a"), listOptions("", ""))
			if err != nil {
				t.Fatal(err)
			}
			list := obj.(*runs.RunList)
			want := append([]runs.Run(nil), list.Items...)
			table, err := storage.ConvertToTable(context.Background(), obj, &metav1.TableOptions{IncludeObject: tt.includeObject})
			if err != nil {
				t.Fatal(err)
			}
			if len(table.Rows) != len(want) {
				t.Fatalf("rows = %d, want %d", len(table.Rows), len(want))
			}
			for i, row := range table.Rows {
				switch o := row.Object.Object.(type) {
				case *runs.Run:
					if !tt.wantWhole || o.Name != want[i].Name {
						t.Errorf("row %d object = run %s, want whole=%v of %s", i, o.Name, tt.wantWhole, want[i].Name)
					}
				case *metav1.PartialObjectMetadata:
					if tt.wantWhole || !reflect.DeepEqual(o.ObjectMeta, want[i].ObjectMeta) {
						t.Errorf("row %d object = metadata %+v, want whole=%v, metadata %+v", i, o.ObjectMeta, tt.wantWhole, want[i].ObjectMeta)
					}
				default:
					t.Errorf("row %d object = %T", i, o)
				}
			}
			if kept := len(list.Items) > 0; kept != tt.wantWhole {
				t.Errorf("list keeps its items = %v, want %v", kept, tt.wantWhole)
			}
		})
	}
}

func TestPlanTable(t *testing.T) {
	src, n := newFixture(t)
	storage := NewPlanREST(src)
	obj, err := storage.List(context.Background(), listOptions("", ""))
	if err != nil {
		t.Fatal(err)
	}
	table, err := storage.ConvertToTable(context.Background(), obj, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []any{n["plan"], "TerraformCluster/db", "Plan", "AwaitingApproval", int64(2), int64(0), int64(0), none, "59m", planHash, false}
	if len(table.Rows) != 1 || !equalAny(table.Rows[0].Cells, want) {
		t.Errorf("rows = %v, want %v", table.Rows, want)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func equalAny(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

package registry

import (
	"context"
	"encoding/base64"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	apistorage "k8s.io/apiserver/pkg/storage"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/apis/runs"
	"github.com/captf/captf/jobs"
)

// listFixture is 13 runs of four objects in two namespaces, three of them plans:
// team-a/api (an apply, a plan), team-a/web (an apply that succeeded, two failures, a running
// drift check), team-b/cache (three refreshes) and team-b/db (two plans and a failed apply).
// A list at a resourceVersion the Source has not reached fails at once.
func listFixture(t *testing.T) (*Source, map[string]*batchv1.Job) {
	t.Helper()
	planResult := withResult(jobs.Summary{Plan: &jobs.PlanSummary{Hash: planHash, Add: 1}})
	js := map[string]*batchv1.Job{
		"api-apply":   newJob("team-a", "api", jobs.OpApply, 1, succeeded(t0.Add(-40*time.Minute))),
		"api-plan":    newJob("team-a", "api", jobs.OpPlan, 1, succeeded(t0.Add(-30*time.Minute)), planResult),
		"web-ok":      newJob("team-a", "web", jobs.OpApply, 1, succeeded(t0.Add(-50*time.Minute))),
		"web-f1":      newJob("team-a", "web", jobs.OpApply, 2, failed(t0.Add(-20*time.Minute))),
		"web-f2":      newJob("team-a", "web", jobs.OpApply, 3, failed(t0.Add(-time.Minute))),
		"web-drift":   newJob("team-a", "web", jobs.OpDrift, 1, started(t0.Add(-30*time.Second))),
		"cache-r1":    newJob("team-b", "cache", jobs.OpRefresh, 1, succeeded(t0.Add(-50*time.Minute))),
		"cache-r2":    newJob("team-b", "cache", jobs.OpRefresh, 2, succeeded(t0.Add(-40*time.Minute))),
		"cache-r3":    newJob("team-b", "cache", jobs.OpRefresh, 3, started(t0.Add(-time.Minute))),
		"db-plan1":    newJob("team-b", "db", jobs.OpPlan, 1, succeeded(t0.Add(-20*time.Minute)), planResult),
		"db-plan2":    newJob("team-b", "db", jobs.OpPlan, 2, succeeded(t0.Add(-10*time.Minute)), withResult(jobs.Summary{Plan: &jobs.PlanSummary{Hash: planHash2}})),
		"db-apply":    newJob("team-b", "db", jobs.OpApply, 1, failed(t0.Add(-5*time.Minute))),
		"db-apply-ok": newJob("team-b", "db", jobs.OpApply, 2, succeeded(t0.Add(-4*time.Minute))),
	}
	objs := []runtime.Object{
		cluster("team-a", "api", nil, nil, nil),
		cluster("team-a", "web", nil, nil, nil),
		cluster("team-b", "cache", nil, nil, nil),
		cluster("team-b", "db", nil, &infrav1.PlanPreview{InputsHash: inputsHash, PlanHash: planHash2, Job: js["db-plan2"].Name}, nil),
	}
	for _, j := range js {
		objs = append(objs, j)
	}
	src := newTestSource(t, objs...)
	src.catchUpWait = 0
	return src, js
}

// lister is the List of a storage.
type lister func(ctx context.Context, o *metainternalversion.ListOptions) (runtime.Object, error)

// listStorage is a storage that lists and renders Tables.
type listStorage interface {
	List(ctx context.Context, o *metainternalversion.ListOptions) (runtime.Object, error)
	ConvertToTable(ctx context.Context, object, tableOptions runtime.Object) (*metav1.Table, error)
}

// listOnce lists once with opts in namespace and returns the items and the list metadata.
func listOnce(t *testing.T, list lister, namespace string, opts metainternalversion.ListOptions) ([]runtime.Object, metav1.ListInterface, error) {
	t.Helper()
	obj, err := list(genericapirequest.WithNamespace(context.Background(), namespace), &opts)
	if err != nil {
		return nil, nil, err
	}
	items, err := meta.ExtractList(obj)
	if err != nil {
		t.Fatal(err)
	}
	lm, err := meta.ListAccessor(obj)
	if err != nil {
		t.Fatal(err)
	}
	return items, lm, nil
}

// keys names items as namespace/name.
func keys(items []runtime.Object) []string {
	out := make([]string, 0, len(items))
	for _, obj := range items {
		m, _ := meta.Accessor(obj)
		out = append(out, m.GetNamespace()+"/"+m.GetName())
	}
	return out
}

// sameItems compares two lists of runs or plans, object by object.
func sameItems(t *testing.T, what string, got, want []runtime.Object) {
	t.Helper()
	if !equalStrings(keys(got), keys(want)) {
		t.Fatalf("%s = %v,\nwant %v", what, keys(got), keys(want))
	}
	for i := range got {
		if !equality.Semantic.DeepEqual(got[i], want[i]) {
			t.Errorf("%s: %s differs:\n got %+v\nwant %+v", what, keys(want)[i], got[i], want[i])
		}
	}
}

// wholeList checks that a list's metadata is a whole list's: no continue token and no count of
// remaining items.
func wholeList(t *testing.T, what string, continueToken string, remaining *int64) {
	t.Helper()
	if continueToken != "" || remaining != nil {
		t.Errorf("%s has continue %q and remainingItemCount %v, want neither", what, continueToken, remaining)
	}
}

func TestLimitIsIgnored(t *testing.T) {
	src, js := listFixture(t)
	runsStorage, plansStorage := NewRunREST(src), NewPlanREST(src)
	tests := []struct {
		name      string
		storage   listStorage
		namespace string
		opts      metainternalversion.ListOptions
		wantItems int
	}{
		{name: "a limit of 1 returns the whole list", storage: runsStorage, opts: metainternalversion.ListOptions{Limit: 1}, wantItems: 13},
		{name: "a limit below the list's length returns the whole list", storage: runsStorage, opts: metainternalversion.ListOptions{Limit: 5}, wantItems: 13},
		{name: "a limit of the list's length returns the whole list", storage: runsStorage, opts: metainternalversion.ListOptions{Limit: 13}, wantItems: 13},
		{name: "a limit past the list returns the whole list", storage: runsStorage, opts: metainternalversion.ListOptions{Limit: 500}, wantItems: 13},
		{name: "a limit in one namespace returns the namespace's whole list", storage: runsStorage, namespace: "team-b", opts: metainternalversion.ListOptions{Limit: 2}, wantItems: 7},
		{name: "a limit with a label selector returns every run it selects", storage: runsStorage, opts: metainternalversion.ListOptions{Limit: 1, LabelSelector: labels.SelectorFromSet(labels.Set{jobs.LabelOp: "apply"})}, wantItems: 6},
		{name: "a limit with a field selector on a computed field returns every run it selects", storage: runsStorage, opts: metainternalversion.ListOptions{Limit: 2, FieldSelector: fields.OneTermEqualSelector("status.phase", "Succeeded")}, wantItems: 8},
		{name: "a limit with a metadata.name selector returns the one run", storage: runsStorage, opts: metainternalversion.ListOptions{Limit: 1, FieldSelector: fields.OneTermEqualSelector("metadata.name", js["web-f2"].Name)}, wantItems: 1},
		{name: "a limit with a selector that selects nothing returns nothing", storage: runsStorage, opts: metainternalversion.ListOptions{Limit: 1, FieldSelector: fields.OneTermEqualSelector("spec.target.name", "nope")}, wantItems: 0},
		{name: "a limit on plans returns every plan", storage: plansStorage, opts: metainternalversion.ListOptions{Limit: 1}, wantItems: 3},
		{name: "a limit on plans with a field selector returns every plan it selects", storage: plansStorage, opts: metainternalversion.ListOptions{Limit: 1, FieldSelector: fields.OneTermEqualSelector("status.phase", "AwaitingApproval")}, wantItems: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			unlimited := tt.opts
			unlimited.Limit = 0
			want, _, err := listOnce(t, tt.storage.List, tt.namespace, unlimited)
			if err != nil {
				t.Fatal(err)
			}
			ctx := genericapirequest.WithNamespace(context.Background(), tt.namespace)
			obj, err := tt.storage.List(ctx, &tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			got, err := meta.ExtractList(obj)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tt.wantItems {
				t.Fatalf("%d items, want %d: %v", len(got), tt.wantItems, keys(got))
			}
			sameItems(t, "the list with a limit", got, want)
			lm, err := meta.ListAccessor(obj)
			if err != nil {
				t.Fatal(err)
			}
			wholeList(t, "the list", lm.GetContinue(), lm.GetRemainingItemCount())

			table, err := tt.storage.ConvertToTable(ctx, obj, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(table.Rows) != len(want) {
				t.Fatalf("the Table has %d rows, want %d", len(table.Rows), len(want))
			}
			for i, row := range table.Rows {
				if m, _ := meta.Accessor(want[i]); row.Cells[0] != m.GetName() {
					t.Errorf("row %d is %v, want %s", i, row.Cells[0], m.GetName())
				}
			}
			wholeList(t, "the Table", table.Continue, table.RemainingItemCount)
			if table.ResourceVersion != lm.GetResourceVersion() || table.ResourceVersion == "" {
				t.Errorf("the Table is at resourceVersion %q, the list at %q", table.ResourceVersion, lm.GetResourceVersion())
			}
		})
	}
}

func TestAContinueIsGone(t *testing.T) {
	src, _ := listFixture(t)
	runsList, plansList := NewRunREST(src).List, NewPlanREST(src).List
	token := func(json string) string { return base64.RawURLEncoding.EncodeToString([]byte(json)) }
	tests := []struct {
		name      string
		list      lister
		namespace string
		opts      metainternalversion.ListOptions
	}{
		{name: "a token of this server's former pages is gone", list: runsList, opts: metainternalversion.ListOptions{Limit: 5, Continue: token(`{"v":1,"rv":105,"ns":"team-a","name":"x"}`)}},
		{name: "a token of the API server's form is gone", list: runsList, opts: metainternalversion.ListOptions{Limit: 500, Continue: token(`{"v":"meta.k8s.io/v1","rv":5,"start":"x"}`)}},
		{name: "a token that is no token is gone", list: runsList, opts: metainternalversion.ListOptions{Continue: "%%%"}},
		{name: `a token with resourceVersion "0" is gone`, list: runsList, opts: metainternalversion.ListOptions{Continue: "x", ResourceVersion: "0"}},
		{name: "a token in one namespace is gone", list: runsList, namespace: "team-b", opts: metainternalversion.ListOptions{Limit: 2, Continue: "x"}},
		{name: "a token of a plans list is gone", list: plansList, opts: metainternalversion.ListOptions{Limit: 1, Continue: "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := listOnce(t, tt.list, tt.namespace, tt.opts)
			if !apierrors.IsResourceExpired(err) || !strings.Contains(err.Error(), "list again without continue") {
				t.Fatalf("err = %v, want 410 Gone saying to list again without continue", err)
			}
			var status apierrors.APIStatus
			if !errors.As(err, &status) || status.Status().Continue != "" {
				t.Fatalf("the answer offers a token to continue with: %+v", err)
			}
		})
	}
}

// TestAListAtAnExactResourceVersion: an exact resourceVersion is served, whole, only while it
// is the current one; one the server has not reached is waited for, then answered as the API
// server answers it.
func TestAListAtAnExactResourceVersion(t *testing.T) {
	src, js := listFixture(t)
	storage := NewRunREST(src)
	_, lm, err := listOnce(t, storage.List, "", metainternalversion.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	older := lm.GetResourceVersion()
	src.testDeleteJob(t, js["web-f1"])
	src.testAddJob(t, newJob("team-a", "web", jobs.OpApply, 4, failed(t0)))
	now, lm, err := listOnce(t, storage.List, "", metainternalversion.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	current := lm.GetResourceVersion()
	if current == older {
		t.Fatalf("the changes left the list at resourceVersion %s", current)
	}
	exact := metav1.ResourceVersionMatchExact
	tests := []struct {
		name    string
		opts    metainternalversion.ListOptions
		wantErr func(error) bool
	}{
		{name: "Exact at the current resourceVersion is the whole current list", opts: metainternalversion.ListOptions{ResourceVersion: current, ResourceVersionMatch: exact}},
		{name: "a resourceVersion with limit and no match is exact, and whole", opts: metainternalversion.ListOptions{ResourceVersion: current, Limit: 3}},
		{name: "Exact at an older resourceVersion is gone", opts: metainternalversion.ListOptions{ResourceVersion: older, ResourceVersionMatch: exact}, wantErr: apierrors.IsResourceExpired},
		{name: "a limit at an older resourceVersion is gone", opts: metainternalversion.ListOptions{ResourceVersion: older, Limit: 3}, wantErr: apierrors.IsResourceExpired},
		{name: "Exact at a resourceVersion not reached is too large", opts: metainternalversion.ListOptions{ResourceVersion: "999999999", ResourceVersionMatch: exact}, wantErr: apistorage.IsTooLargeResourceVersion},
		{name: "an older resourceVersion without limit or match is the newest list", opts: metainternalversion.ListOptions{ResourceVersion: older}},
		{name: "NotOlderThan an older resourceVersion is the newest list", opts: metainternalversion.ListOptions{ResourceVersion: older, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, Limit: 3}},
		{name: `resourceVersion "0" with limit is the newest list`, opts: metainternalversion.ListOptions{ResourceVersion: "0", Limit: 3}},
		{name: "a resourceVersion that is no number is a bad request", opts: metainternalversion.ListOptions{ResourceVersion: "yesterday", Limit: 3}, wantErr: apierrors.IsBadRequest},
		{name: "a resourceVersion that is no number is a bad request without limit too", opts: metainternalversion.ListOptions{ResourceVersion: "yesterday"}, wantErr: apierrors.IsBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, lm, err := listOnce(t, storage.List, "", tt.opts)
			if tt.wantErr != nil {
				if !tt.wantErr(err) {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if lm.GetResourceVersion() != current {
				t.Errorf("resourceVersion %s, want the current %s", lm.GetResourceVersion(), current)
			}
			sameItems(t, "the list", got, now)
			wholeList(t, "the list", lm.GetContinue(), lm.GetRemainingItemCount())
		})
	}
	t.Run("Exact at a resourceVersion the server reaches while the list waits is served", func(t *testing.T) {
		src.catchUpWait = time.Minute
		defer func() { src.catchUpWait = 0 }()
		job := newJob("team-b", "cache", jobs.OpRefresh, 4)
		rvCounter++
		next := strconv.Itoa(rvCounter)
		job.ResourceVersion = next
		listed := make(chan error, 1)
		go func() {
			obj, err := storage.List(context.Background(), &metainternalversion.ListOptions{ResourceVersion: next, ResourceVersionMatch: exact})
			if err == nil {
				if rv := obj.(*runs.RunList).ResourceVersion; rv != next {
					err = errors.New("the list is at resourceVersion " + rv + ", want " + next)
				}
			}
			listed <- err
		}()
		if err := (&jobFeed{src: src}).Add(job); err != nil {
			t.Fatal(err)
		}
		if err := <-listed; err != nil {
			t.Fatal(err)
		}
	})
}

// TestWholeListsWhileJobsChange lists while the feed adds and deletes Jobs: every list is
// whole and in order, no run comes twice and the Jobs that stay are all there. Run it with
// -race.
func TestWholeListsWhileJobsChange(t *testing.T) {
	src, _ := listFixture(t)
	storage := NewRunREST(src)
	stable, _, err := listOnce(t, storage.List, "", metainternalversion.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		feed := &jobFeed{src: src}
		for i := int32(1); ; i++ {
			select {
			case <-done:
				return
			default:
			}
			job := newJob("team-a", "web", jobs.OpRefresh, i%5+1)
			job.ResourceVersion = nextRV()
			if err := feed.Add(job); err != nil {
				t.Error(err)
				return
			}
			deleted := recordOfJob(job)
			deleted.resourceVersion = nextRV()
			if err := feed.Delete(deleted); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for range 20 {
		items, lm, err := listOnce(t, storage.List, "", metainternalversion.ListOptions{Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		wholeList(t, "the list", lm.GetContinue(), lm.GetRemainingItemCount())
		got := keys(items)
		for i := 1; i < len(got); i++ {
			if got[i-1] >= got[i] {
				t.Fatalf("out of order or twice: %s then %s", got[i-1], got[i])
			}
		}
		for _, k := range keys(stable) {
			if !strings.Contains(strings.Join(got, " "), k) {
				t.Fatalf("%s is missing from %v", k, got)
			}
		}
	}
	close(done)
	<-stopped
}

func TestSortItems(t *testing.T) {
	run := func(key string) runs.Run {
		namespace, name, _ := strings.Cut(key, "/")
		return runs.Run{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	}
	tests := []struct {
		name string
		keys []string
	}{
		{name: "no items stay none", keys: nil},
		{name: "one item stays", keys: []string{"a/x"}},
		{name: "sorted items stay in place", keys: []string{"a/x", "a/y", "b/x"}},
		{name: "reversed items are turned around", keys: []string{"c/z", "b/y", "b/x", "a/z", "a/y"}},
		{name: "items in one cycle each move once to their place", keys: []string{"a/2", "a/3", "a/4", "a/5", "a/1"}},
		{name: "items in several cycles and fixed places are all placed", keys: []string{"a/2", "a/1", "a/3", "a/6", "a/4", "a/5", "a/8", "a/7"}},
		{name: "the namespace orders before the name", keys: []string{"b/a", "a/z", "a/a", "b/0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			items := make([]runs.Run, len(tt.keys))
			for i, k := range tt.keys {
				items[i] = run(k)
			}
			want := slices.Clone(tt.keys)
			slices.Sort(want)
			sortItems(items)
			got := make([]string, len(items))
			for i := range items {
				got[i] = items[i].Namespace + "/" + items[i].Name
			}
			if !slices.Equal(got, want) {
				t.Fatalf("sorted %v to %v, want %v", tt.keys, got, want)
			}
		})
	}
}

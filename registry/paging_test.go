package registry

import (
	"context"
	"encoding/base64"
	"errors"
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
	"github.com/captf/captf/jobs"
)

// pagingFixture is 13 runs of four objects in two namespaces, three of them plans:
// team-a/api (an apply, a plan), team-a/web (an apply that succeeded, two failures, a running
// drift check), team-b/cache (three refreshes) and team-b/db (two plans and a failed apply).
func pagingFixture(t *testing.T) (*Source, map[string]*batchv1.Job) {
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

// pageThrough lists with opts and follows continue to the end. It checks that no page holds more
// than opts.Limit items and that every page has the first one's resourceVersion.
func pageThrough(t *testing.T, list lister, namespace string, opts metainternalversion.ListOptions) []runtime.Object {
	t.Helper()
	var all []runtime.Object
	rv := ""
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatal("more than 100 pages")
		}
		items, lm, err := listOnce(t, list, namespace, opts)
		if err != nil {
			t.Fatalf("page %d: %v", pages+1, err)
		}
		if opts.Limit > 0 && int64(len(items)) > opts.Limit {
			t.Fatalf("page %d holds %d items, more than the limit %d", pages+1, len(items), opts.Limit)
		}
		if rv == "" {
			rv = lm.GetResourceVersion()
		} else if lm.GetResourceVersion() != rv {
			t.Fatalf("page %d is at resourceVersion %s, the first at %s", pages+1, lm.GetResourceVersion(), rv)
		}
		all = append(all, items...)
		if lm.GetContinue() == "" {
			return all
		}
		opts.Continue = lm.GetContinue()
	}
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

func TestPagesCoverTheListOnceInOrder(t *testing.T) {
	src, js := pagingFixture(t)
	runsList, plansList := NewRunREST(src).List, NewPlanREST(src).List
	tests := []struct {
		name      string
		list      lister
		namespace string
		opts      metainternalversion.ListOptions
	}{
		{name: "pages of 1", list: runsList, opts: metainternalversion.ListOptions{Limit: 1}},
		{name: "pages of 2", list: runsList, opts: metainternalversion.ListOptions{Limit: 2}},
		{name: "pages of 5, the last one short", list: runsList, opts: metainternalversion.ListOptions{Limit: 5}},
		{name: "one page as large as the list", list: runsList, opts: metainternalversion.ListOptions{Limit: 13}},
		{name: "a limit past the list", list: runsList, opts: metainternalversion.ListOptions{Limit: 500}},
		{name: "limit 0 is everything at once", list: runsList, opts: metainternalversion.ListOptions{}},
		{name: "pages of one namespace", list: runsList, namespace: "team-b", opts: metainternalversion.ListOptions{Limit: 2}},
		{name: "a label selector applies to every page", list: runsList, opts: metainternalversion.ListOptions{Limit: 1, LabelSelector: labels.SelectorFromSet(labels.Set{jobs.LabelOp: "apply"})}},
		{name: "a field selector on a computed field applies to every page", list: runsList, opts: metainternalversion.ListOptions{Limit: 2, FieldSelector: fields.OneTermEqualSelector("status.phase", "Succeeded")}},
		{name: "a field selector that selects one run past many others", list: runsList, opts: metainternalversion.ListOptions{Limit: 1, FieldSelector: fields.OneTermEqualSelector("status.phase", "Running")}},
		{name: "metadata.name", list: runsList, opts: metainternalversion.ListOptions{Limit: 1, FieldSelector: fields.OneTermEqualSelector("metadata.name", js["web-f2"].Name)}},
		{name: "a selector that selects nothing", list: runsList, opts: metainternalversion.ListOptions{Limit: 1, FieldSelector: fields.OneTermEqualSelector("spec.target.name", "nope")}},
		{name: "plans in pages of 1", list: plansList, opts: metainternalversion.ListOptions{Limit: 1}},
		{name: "plans selected by phase", list: plansList, opts: metainternalversion.ListOptions{Limit: 1, FieldSelector: fields.OneTermEqualSelector("status.phase", "AwaitingApproval")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			whole := tt.opts
			whole.Limit = 0
			want, _, err := listOnce(t, tt.list, tt.namespace, whole)
			if err != nil {
				t.Fatal(err)
			}
			got := pageThrough(t, tt.list, tt.namespace, tt.opts)
			sameItems(t, "the pages", got, want)
		})
	}
	t.Run("the fixture has what the rows above select", func(t *testing.T) {
		all, _, _ := listOnce(t, runsList, "", metainternalversion.ListOptions{})
		plans, _, _ := listOnce(t, plansList, "", metainternalversion.ListOptions{})
		if len(all) != 13 || len(plans) != 3 {
			t.Fatalf("%d runs and %d plans, want 13 and 3", len(all), len(plans))
		}
	})
	t.Run("a page that ends the list has no continue", func(t *testing.T) {
		_, lm, err := listOnce(t, runsList, "", metainternalversion.ListOptions{Limit: 13})
		if err != nil || lm.GetContinue() != "" {
			t.Fatalf("continue = %q, err = %v", lm.GetContinue(), err)
		}
	})
}

func TestPagesAreASnapshot(t *testing.T) {
	src, js := pagingFixture(t)
	storage := NewRunREST(src)
	before, _, err := listOnce(t, storage.List, "", metainternalversion.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first, lm, err := listOnce(t, storage.List, "", metainternalversion.ListOptions{Limit: 4})
	if err != nil {
		t.Fatal(err)
	}

	// After the first page: a failure after web's two pushes them down the history and takes
	// the backoff window (the siblings' computed fields change), the drift check finishes, a
	// refresh of cache is deleted, a new object's Job appears, and a Job of the first page goes.
	src.testAddJob(t, newJob("team-a", "web", jobs.OpApply, 4, failed(t0)))
	succeeded(t0)(js["web-drift"])
	src.testUpdateJob(t, js["web-drift"])
	src.testDeleteJob(t, js["cache-r2"])
	src.testAddJob(t, newJob("team-b", "zeta", jobs.OpApply, 1))
	src.testDeleteJob(t, js["api-apply"])

	rest := pageThrough(t, storage.List, "", metainternalversion.ListOptions{Limit: 4, Continue: lm.GetContinue()})
	sameItems(t, "the pages of the snapshot", append(first, rest...), before)

	now, _, err := listOnce(t, storage.List, "", metainternalversion.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fresh := strings.Join(keys(now), " ")
	if strings.Contains(fresh, js["api-apply"].Name) || strings.Contains(fresh, js["cache-r2"].Name) ||
		!strings.Contains(fresh, "captf-c-web-apply-a4-") || !strings.Contains(fresh, "captf-c-zeta-apply-a1-") {
		t.Fatalf("a fresh list does not see the changes: %v", keys(now))
	}
	sameItems(t, "a fresh paged list", pageThrough(t, storage.List, "", metainternalversion.ListOptions{Limit: 3}), now)

	t.Run("plans", func(t *testing.T) {
		plans := NewPlanREST(src)
		before, _, err := listOnce(t, plans.List, "", metainternalversion.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		first, lm, err := listOnce(t, plans.List, "", metainternalversion.ListOptions{Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		// A newer plan of db supersedes the one waiting, and the first one goes.
		src.testAddJob(t, newJob("team-b", "db", jobs.OpPlan, 3, succeeded(t0), withResult(jobs.Summary{Plan: &jobs.PlanSummary{Hash: planHash}})))
		src.testDeleteJob(t, js["db-plan1"])
		rest := pageThrough(t, plans.List, "", metainternalversion.ListOptions{Limit: 1, Continue: lm.GetContinue()})
		sameItems(t, "the plans of the snapshot", append(first, rest...), before)
	})
}

// TestAListAtAnExactResourceVersion: an exact resourceVersion reads the snapshot at it, as a
// first page or as a whole list; one the server has not reached, or no longer keeps, is
// answered as the API server answers it.
func TestAListAtAnExactResourceVersion(t *testing.T) {
	src, js := pagingFixture(t)
	storage := NewRunREST(src)
	before, lm, err := listOnce(t, storage.List, "", metainternalversion.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	at := lm.GetResourceVersion()
	src.testDeleteJob(t, js["web-f1"])
	src.testAddJob(t, newJob("team-a", "web", jobs.OpApply, 4, failed(t0)))
	newest := src.listRV()
	tests := []struct {
		name    string
		opts    metainternalversion.ListOptions
		want    []runtime.Object
		wantErr func(error) bool
	}{
		{name: "resourceVersionMatch Exact, whole", opts: metainternalversion.ListOptions{ResourceVersion: at, ResourceVersionMatch: metav1.ResourceVersionMatchExact}, want: before},
		{name: "resourceVersionMatch Exact, a page", opts: metainternalversion.ListOptions{ResourceVersion: at, ResourceVersionMatch: metav1.ResourceVersionMatchExact, Limit: 3}, want: before[:3]},
		{name: "a resourceVersion with limit and no match is exact", opts: metainternalversion.ListOptions{ResourceVersion: at, Limit: 3}, want: before[:3]},
		{name: "a resourceVersion without limit or match is not older than", opts: metainternalversion.ListOptions{ResourceVersion: at}, want: nil},
		{name: "a resourceVersion not reached yet is too large", opts: metainternalversion.ListOptions{ResourceVersion: "999999999", ResourceVersionMatch: metav1.ResourceVersionMatchExact}, wantErr: apistorage.IsTooLargeResourceVersion},
		{name: "a resourceVersion older than the kept changes is gone", opts: metainternalversion.ListOptions{ResourceVersion: "1", Limit: 3}, wantErr: apierrors.IsResourceExpired},
		{name: "a resourceVersion that is no number is a bad request", opts: metainternalversion.ListOptions{ResourceVersion: "yesterday", Limit: 3}, wantErr: apierrors.IsBadRequest},
	}
	// Push the oldest changes out of the log, so that resourceVersion 1 is older than it keeps.
	src.jobs.mu.Lock()
	src.jobs.changes.floor = 2
	src.jobs.mu.Unlock()
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
			if tt.want == nil {
				if lm.GetResourceVersion() != newest {
					t.Fatalf("resourceVersion %s, want the newest %s", lm.GetResourceVersion(), newest)
				}
				return
			}
			if lm.GetResourceVersion() != at {
				t.Errorf("resourceVersion %s, want %s", lm.GetResourceVersion(), at)
			}
			sameItems(t, "the list", got, tt.want)
		})
	}
}

func TestAnExpiredContinueTokenIsGone(t *testing.T) {
	src, js := pagingFixture(t)
	storage := NewRunREST(src)
	_, lm, err := listOnce(t, storage.List, "", metainternalversion.ListOptions{Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	// More changes than the server keeps, each a new version of a Job of the first page.
	for range changeHistory + 1 {
		src.testUpdateJob(t, js["api-apply"])
	}
	_, _, err = listOnce(t, storage.List, "", metainternalversion.ListOptions{Limit: 5, Continue: lm.GetContinue()})
	if !apierrors.IsResourceExpired(err) || !strings.Contains(err.Error(), "continue token has expired") || !strings.Contains(err.Error(), "start the list again") {
		t.Fatalf("err = %v, want 410 Gone saying the continue token expired", err)
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Continue == "" {
		t.Fatalf("the answer offers no token to continue with: %+v", err)
	}

	// The offered token continues after the same key, at the newest version.
	rest := pageThrough(t, storage.List, "", metainternalversion.ListOptions{Limit: 5, Continue: status.Status().Continue})
	now, _, err := listOnce(t, storage.List, "", metainternalversion.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sameItems(t, "the rest at the newest version", rest, now[5:])
}

func TestAMalformedContinueIsABadRequest(t *testing.T) {
	src, _ := pagingFixture(t)
	storage := NewRunREST(src)
	_, lm, err := listOnce(t, storage.List, "", metainternalversion.ListOptions{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	good := lm.GetContinue()
	token := func(json string) string { return base64.RawURLEncoding.EncodeToString([]byte(json)) }
	tests := []struct {
		name      string
		namespace string
		opts      metainternalversion.ListOptions
		wantText  string
	}{
		{name: "not base64", opts: metainternalversion.ListOptions{Continue: "%%%"}, wantText: "invalid continue token"},
		{name: "base64 of no JSON", opts: metainternalversion.ListOptions{Continue: token("hello")}, wantText: "invalid continue token"},
		{name: "another server's token", opts: metainternalversion.ListOptions{Continue: token(`{"v":"meta.k8s.io/v1","rv":5,"start":"x"}`)}, wantText: "invalid continue token"},
		{name: "an unknown version", opts: metainternalversion.ListOptions{Continue: token(`{"v":2,"rv":5,"ns":"a","name":"b"}`)}, wantText: "invalid continue token"},
		{name: "no resourceVersion", opts: metainternalversion.ListOptions{Continue: token(`{"v":1,"ns":"a","name":"b"}`)}, wantText: "invalid continue token"},
		{name: "a negative resourceVersion", opts: metainternalversion.ListOptions{Continue: token(`{"v":1,"rv":-5,"ns":"a","name":"b"}`)}, wantText: "invalid continue token"},
		{name: "no last key", opts: metainternalversion.ListOptions{Continue: token(`{"v":1,"rv":5}`)}, wantText: "invalid continue token"},
		{name: "data after the token", opts: metainternalversion.ListOptions{Continue: token(`{"v":1,"rv":5,"ns":"a","name":"b"}{}`)}, wantText: "invalid continue token"},
		{name: "a token of another namespace", namespace: "team-b", opts: metainternalversion.ListOptions{Continue: good}, wantText: "continue token"},
		{name: "a resourceVersion with continue", opts: metainternalversion.ListOptions{Continue: good, ResourceVersion: "5"}, wantText: "continue"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := listOnce(t, storage.List, tt.namespace, tt.opts)
			if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), tt.wantText) {
				t.Fatalf("err = %v, want 400 saying %q", err, tt.wantText)
			}
		})
	}
	t.Run(`resourceVersion "0" with continue is ignored`, func(t *testing.T) {
		if _, _, err := listOnce(t, storage.List, "", metainternalversion.ListOptions{Continue: good, ResourceVersion: "0"}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a plans list answers the same", func(t *testing.T) {
		_, _, err := listOnce(t, NewPlanREST(src).List, "", metainternalversion.ListOptions{Limit: 1, Continue: "%%%"})
		if !apierrors.IsBadRequest(err) {
			t.Fatalf("err = %v", err)
		}
	})
}

// TestARelistsDeletionsComeAfterThePagesBegunBefore: a Job that a relist finds gone was deleted
// after any page the server answered before, so the pages of such a list still show it.
func TestARelistsDeletionsComeAfterThePagesBegunBefore(t *testing.T) {
	src, js := pagingFixture(t)
	storage := NewRunREST(src)
	before, _, err := listOnce(t, storage.List, "", metainternalversion.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first, lm, err := listOnce(t, storage.List, "", metainternalversion.ListOptions{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	var list []any
	for _, r := range src.jobs.byName {
		if r.name != js["db-apply"].Name {
			list = append(list, r)
		}
	}
	relistRV := strconv.Itoa(rvCounter + 1000)
	if err := (&jobFeed{src: src}).Replace(list, relistRV); err != nil {
		t.Fatal(err)
	}
	rest := pageThrough(t, storage.List, "", metainternalversion.ListOptions{Limit: 2, Continue: lm.GetContinue()})
	sameItems(t, "the pages begun before the relist", append(first, rest...), before)
	now, lm, err := listOnce(t, storage.List, "", metainternalversion.ListOptions{Limit: 20})
	if err != nil || len(now) != len(before)-1 || lm.GetResourceVersion() != relistRV {
		t.Fatalf("after the relist: %v at %s, err %v", keys(now), lm.GetResourceVersion(), err)
	}
}

// TestPagingWhileJobsChange pages while the feed adds and deletes Jobs: every page is in order,
// no run comes twice and the Jobs that stay are all there. Run it with -race.
func TestPagingWhileJobsChange(t *testing.T) {
	src, _ := pagingFixture(t)
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
		got := keys(pageThrough(t, storage.List, "", metainternalversion.ListOptions{Limit: 2}))
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

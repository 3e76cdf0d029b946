package registry

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/utils/ptr"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/apis/runs"
	"github.com/captf/captf/jobs"
)

// The tests of the rule "Only the controller's own Jobs and pods count": a Job is a run of an
// object only through its controller owner reference to the object (a kind of the
// infrastructure group, and the object's UID where the server knows the object).

// forged makes a Job carry the captf labels without the controller's reference: renamed, so
// that it stands next to the Job it copies.
func forged(suffix string, change func(*batchv1.Job)) jobOpt {
	return func(j *batchv1.Job) {
		j.Name += "-" + suffix
		j.UID = types.UID("uid-" + j.Name)
		change(j)
	}
}

// withoutReference leaves only the labels: what anyone who may create Jobs can copy.
func withoutReference(j *batchv1.Job) { j.OwnerReferences = nil }

// inForeignGroup points the controller reference to a kind of the same name in another group.
func inForeignGroup(j *batchv1.Job) { j.OwnerReferences[0].APIVersion = "evil.example.com/v1" }

// ofEarlierObject points the controller reference to an object of the same name with another
// UID: an earlier one, or a made-up one.
func ofEarlierObject(j *batchv1.Job) { j.OwnerReferences[0].UID += "-earlier" }

// withMaxAttempt gives the Job the largest attempt an attempt label holds.
func withMaxAttempt(j *batchv1.Job) { j.Labels[jobs.LabelAttempt] = "2147483647" }

// forgedJobs are Jobs of team-a/web by their labels that are no runs of the web the server
// knows; each would, were it in web's history, be its newest apply or plan and change the
// retry numbers, retention, backoff window and plan phases of the real runs.
func forgedJobs() []*batchv1.Job {
	applied := annotated(jobs.AnnotationApprovedPlan, planHash)
	return []*batchv1.Job{
		newJob("team-a", "web", jobs.OpApply, 9, succeeded(t0.Add(-time.Second)), applied, forged("labels", func(j *batchv1.Job) { withoutReference(j); withMaxAttempt(j) })),
		newJob("team-a", "web", jobs.OpApply, 8, failed(t0.Add(-time.Second)), forged("group", inForeignGroup)),
		newJob("team-a", "web", jobs.OpApply, 7, succeeded(t0.Add(-time.Second)), applied, forged("earlier", ofEarlierObject)),
		newJob("team-a", "web", jobs.OpPlan, 9, succeeded(t0), withResult(jobs.Summary{Plan: &jobs.PlanSummary{Hash: planHash2}}), forged("plan", withoutReference)),
	}
}

// ownFixture is web's real history: a success, two failures in backoff and a plan awaiting
// approval, with the object that names the plan in status.plan.
func ownFixture() ([]runtime.Object, []string) {
	ok := newJob("team-a", "web", jobs.OpApply, 1, succeeded(t0.Add(-50*time.Minute)))
	f1 := newJob("team-a", "web", jobs.OpApply, 2, failed(t0.Add(-20*time.Minute)))
	f2 := newJob("team-a", "web", jobs.OpApply, 3, failed(t0.Add(-time.Minute)))
	plan := newJob("team-a", "web", jobs.OpPlan, 1, succeeded(t0.Add(-5*time.Minute)), withResult(jobs.Summary{Plan: &jobs.PlanSummary{Hash: planHash, Add: 2}}))
	web := cluster("team-a", "web", ptr.To[int32](5), &infrav1.PlanPreview{InputsHash: inputsHash, PlanHash: planHash, Job: plan.Name}, nil)
	return []runtime.Object{ok, f1, f2, plan, web}, []string{ok.Name, f1.Name, f2.Name, plan.Name}
}

func TestOnlyTheControllersOwnJobsCount_ForgedJobsAreNoRuns(t *testing.T) {
	own, ownNames := ownFixture()
	clean := newTestSource(t, own...)
	objs := append([]runtime.Object(nil), own...)
	for _, j := range forgedJobs() {
		objs = append(objs, j)
	}
	src := newTestSource(t, objs...)
	ctx := genericapirequest.WithNamespace(context.Background(), "team-a")

	for _, opts := range []*metainternalversion.ListOptions{
		listOptions("", ""),
		{LabelSelector: labels.SelectorFromSet(labels.Set{jobs.LabelOwnerName: "web"})},
		listOptions("", "spec.target.name=web"),
	} {
		obj, err := NewRunREST(src).List(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		want, err := NewRunREST(clean).List(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		// Not just the names: every computed field is what web's own history gives.
		if got, want := obj.(*runs.RunList).Items, want.(*runs.RunList).Items; !equality.Semantic.DeepEqual(got, want) {
			t.Errorf("runs with %v among forged Jobs differ from web's own:\n%s", opts, diff.Diff(want, got))
		}
	}
	gotPlans, err := NewPlanREST(src).List(ctx, listOptions("", ""))
	if err != nil {
		t.Fatal(err)
	}
	wantPlans, err := NewPlanREST(clean).List(ctx, listOptions("", ""))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := gotPlans.(*runs.PlanList).Items, wantPlans.(*runs.PlanList).Items; !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("plans among forged Jobs differ from web's own:\n%s", diff.Diff(want, got))
	}
	if p := gotPlans.(*runs.PlanList).Items; len(p) != 1 || p[0].Name != ownNames[3] || p[0].Status.Phase != runs.PlanPhaseAwaitingApproval {
		t.Errorf("plans = %+v, want %s awaiting approval", p, ownNames[3])
	}
	for _, j := range forgedJobs() {
		if _, err := NewRunREST(src).Get(ctx, j.Name, &metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("run %s: err = %v, want 404", j.Name, err)
		}
		if _, err := NewPlanREST(src).Get(ctx, j.Name, &metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("plan %s: err = %v, want 404", j.Name, err)
		}
	}
}

func TestOnlyTheControllersOwnJobsCount_RunsOfAnUnknownObjectAreSplitByUID(t *testing.T) {
	// No object: every UID's Jobs are the runs of one object, shown with their own history.
	a1 := newJob("team-a", "gone", jobs.OpApply, 1, failed(t0.Add(-30*time.Minute)))
	a2 := newJob("team-a", "gone", jobs.OpApply, 2, failed(t0.Add(-20*time.Minute)))
	b3 := newJob("team-a", "gone", jobs.OpApply, 3, failed(t0.Add(-10*time.Minute)), ofEarlierObject)
	src := newTestSource(t, a1, a2, b3)
	ctx := genericapirequest.WithNamespace(context.Background(), "team-a")
	for name, want := range map[string]int32{a1.Name: 1, a2.Name: 2, b3.Name: 1} {
		obj, err := NewRunREST(src).Get(ctx, name, &metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r := obj.(*runs.Run); r.Status.RetryNumber != want || (r.Status.Backoff != nil) != (name != a1.Name) {
			t.Errorf("%s: retry %d, backoff %+v; want retry %d and the window on each object's newest failure", name, r.Status.RetryNumber, r.Status.Backoff, want)
		}
	}

	// Once an object of that name is known, only its runs are shown.
	if err := src.add(cluster("team-a", "gone", nil, nil, nil)); err != nil {
		t.Fatal(err)
	}
	obj, err := NewRunREST(src).List(ctx, listOptions("", ""))
	if err != nil {
		t.Fatal(err)
	}
	if got := names(obj.(*runs.RunList).Items, func(r runs.Run) string { return r.Name }); !equalStrings(got, []string{a1.Name, a2.Name}) {
		t.Errorf("runs = %v, want only the known object's", got)
	}
	if _, err := NewRunREST(src).Get(ctx, b3.Name, &metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the run of an earlier object: err = %v, want 404", err)
	}
}

func TestOnlyTheControllersOwnJobsCount_FeedKeepsOnlyRuns(t *testing.T) {
	own, _ := ownFixture()
	src := newTestSource(t, own[len(own)-1])
	src.synced.Store(false)
	feed := &jobFeed{src: src}
	list := []any{}
	for _, o := range own[:len(own)-1] {
		list = append(list, o)
	}
	for _, j := range forgedJobs() {
		list = append(list, recordOfJob(j))
	}
	if err := feed.Replace(list, "1"); err != nil {
		t.Fatal(err)
	}
	// The run of an earlier web is a run, of another object, and kept (the views leave it out);
	// the Jobs with the labels alone or a reference to another group are not.
	if n := src.jobs.len(); n != len(own) {
		t.Errorf("the store keeps %d Jobs, want web's %d runs and the earlier web's one", n, len(own)-1)
	}
	for _, j := range []*batchv1.Job{forgedJobs()[0], forgedJobs()[1], forgedJobs()[3]} {
		if _, ok := src.job(j.Namespace, j.Name); ok {
			t.Errorf("the initial list stored %s, which is no run", j.Name)
		}
	}
	for _, j := range forgedJobs()[:2] {
		if err := feed.Add(j); err != nil {
			t.Fatal(err)
		}
		if _, ok := src.job(j.Namespace, j.Name); ok {
			t.Errorf("the feed stored %s, which is no run", j.Name)
		}
	}
}

func TestOnlyTheControllersOwnJobsCount_WatchShowsNoForgedJob(t *testing.T) {
	first := newJob("team-a", "web", jobs.OpApply, 1, failed(t0.Add(-10*time.Minute)))
	second := newJob("team-a", "web", jobs.OpApply, 2, failed(t0.Add(-5*time.Minute)))
	web := cluster("team-a", "web", nil, nil, nil)
	src := newTestSource(t, first, second, web)
	w := watchRuns(t, src, &metainternalversion.ListOptions{ResourceVersion: src.listRV()})

	// Forged Jobs, which would take the backoff window over, publish nothing.
	for _, j := range forgedJobs() {
		src.testAddJob(t, j)
	}
	quiet(t, w)

	// A run whose Job loses its controller reference (orphaned) is gone, and its sibling takes
	// the backoff window back.
	withoutReference(second)
	src.testUpdateJob(t, second)
	expect(t, w, seen{watch.Deleted, second.Name, "Failed"}, seen{watch.Modified, first.Name, "Failed"})
	if _, ok := src.job("team-a", second.Name); ok {
		t.Error("the store keeps a Job that lost its controller reference")
	}
	if r, _ := src.getRun("team-a", first.Name); r.Status.Backoff == nil {
		t.Errorf("the remaining failure carries no backoff window: %+v", r.Status)
	}
	quiet(t, w)

	// With no object of that name, each object's runs are shown, also those of the earlier
	// object the forged reference names; a new object of the name hides all but its own.
	earlier := forgedJobs()[2].Name
	deleteOwner(t, src, "team-a", "web")
	expect(t, w, seen{watch.Added, earlier, "Succeeded"})
	addOwner(t, src, cluster("team-a", "web", nil, nil, nil), "uid-web-new")
	expect(t, w, seen{watch.Deleted, first.Name, "Failed"}, seen{watch.Deleted, earlier, "Succeeded"})
	quiet(t, w)
}

// addOwner adds obj with uid to the object store and publishes the event, as the informer does.
func addOwner(t *testing.T, src *Source, obj *infrav1.TerraformCluster, uid types.UID) {
	t.Helper()
	obj.UID = uid
	r, _ := recordOfOwner(obj)
	if err := src.owners[jobs.KindCluster].Add(r); err != nil {
		t.Fatal(err)
	}
	src.onOwnerEvent(nil, r)
}

// deleteOwner removes an object from the object store and publishes the event.
func deleteOwner(t *testing.T, src *Source, namespace, name string) {
	t.Helper()
	obj, ok, _ := src.owners[jobs.KindCluster].GetByKey(namespace + "/" + name)
	if !ok {
		t.Fatalf("no TerraformCluster %s/%s", namespace, name)
	}
	if err := src.owners[jobs.KindCluster].Delete(obj); err != nil {
		t.Fatal(err)
	}
	src.onOwnerEvent(obj.(*ownerRecord), nil)
}

func TestOnlyTheControllersOwnJobsCount_ApprovalOfAForgedPlan(t *testing.T) {
	ns := "team-a"
	plan := newJob(ns, "web", jobs.OpPlan, 1, succeeded(t0.Add(-5*time.Minute)), withResult(jobs.Summary{Plan: &jobs.PlanSummary{Hash: planHash}}))
	// The forged plan is even named in status.plan, as if it were current.
	forgedPlan := newJob(ns, "web", jobs.OpPlan, 2, succeeded(t0), withResult(jobs.Summary{Plan: &jobs.PlanSummary{Hash: planHash2}}), forged("labels", withoutReference))
	foreignPlan := newJob(ns, "web", jobs.OpPlan, 3, succeeded(t0), withResult(jobs.Summary{Plan: &jobs.PlanSummary{Hash: planHash2}}), forged("group", inForeignGroup))
	earlierPlan := newJob(ns, "web", jobs.OpPlan, 4, succeeded(t0), withResult(jobs.Summary{Plan: &jobs.PlanSummary{Hash: planHash2}}), forged("earlier", ofEarlierObject))
	// Were it web's, this apply of the real plan would make it Applied.
	earlierApply := newJob(ns, "web", jobs.OpApply, 5, succeeded(t0), annotated(jobs.AnnotationApprovedPlan, planHash), withMaxAttempt, forged("earlier", ofEarlierObject))
	forgedPreview := cluster(ns, "web", nil, &infrav1.PlanPreview{InputsHash: inputsHash, PlanHash: planHash2, Job: forgedPlan.Name}, nil)
	realPreview := cluster(ns, "web", nil, &infrav1.PlanPreview{InputsHash: inputsHash, PlanHash: planHash, Job: plan.Name}, nil)

	tests := []struct {
		name      string
		plan      *batchv1.Job
		hash      string
		web       *infrav1.TerraformCluster
		wantErr   func(error) bool
		wantInErr string
	}{
		{name: "a plan Job with the labels alone is not found", plan: forgedPlan, hash: planHash2, web: forgedPreview,
			wantErr: apierrors.IsNotFound, wantInErr: "has no controller owner reference to a TerraformCluster, TerraformMachine or TerraformMachinePool"},
		{name: "a plan Job controlled by a kind of another group is not found", plan: foreignPlan, hash: planHash2, web: forgedPreview,
			wantErr: apierrors.IsNotFound, wantInErr: "has no controller owner reference"},
		{name: "a plan Job of an earlier object of the same name is not found", plan: earlierPlan, hash: planHash2, web: forgedPreview,
			wantErr: apierrors.IsNotFound, wantInErr: "was made for a TerraformCluster web with UID uid-web-earlier, not for the current one (UID uid-web)"},
		{name: "the object's own plan is approved, whatever the other Jobs say", plan: plan, hash: planHash, web: realPreview},
	}
	for _, tt := range tests {
		for _, cached := range []bool{true, false} {
			t.Run(tt.name+", cached "+strconv.FormatBool(cached), func(t *testing.T) {
				all := []runtime.Object{tt.web}
				live := fakeJobs{}
				for _, j := range []*batchv1.Job{plan, forgedPlan, foreignPlan, earlierPlan, earlierApply} {
					if cached {
						all = append(all, j)
					}
					live[j.Name] = j
				}
				if !cached {
					all = append(all, plan) // the cache has the real plan only
				}
				src := newTestSource(t, all...)
				objects := newFakeObjects(tt.web)
				ctx := genericapirequest.WithUser(genericapirequest.WithNamespace(context.Background(), ns), &user.DefaultInfo{Name: "mallory"})
				obj, err := NewApprovalREST(src, objects, live).Create(ctx, tt.plan.Name, body(tt.plan.Name, tt.hash), nil, &metav1.CreateOptions{})
				if tt.wantErr == nil {
					if err != nil || len(objects.writes) != 1 || objects.writes[0].annotations[jobs.AnnotationApprovePlan] != tt.hash {
						t.Fatalf("err = %v, writes %+v; want the approval of %s written", err, objects.writes, tt.hash)
					}
					if got := obj.(*runs.PlanApproval).Status.Target; got == nil || got.Name != "web" {
						t.Errorf("target = %+v", got)
					}
					return
				}
				if !tt.wantErr(err) || !strings.Contains(errString(err), tt.wantInErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantInErr)
				}
				if len(objects.writes) != 0 {
					t.Errorf("wrote %+v on the object", objects.writes)
				}
			})
		}
	}
}

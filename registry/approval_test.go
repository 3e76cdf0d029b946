package registry

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/apis/runs"
	"github.com/captf/captf/jobs"
)

// fakeObjects is Objects over a map, with a resourceVersion check like the API server's.
type fakeObjects struct {
	objects map[string]*ownerRecord
	// conflicts is how many writes to fail with 409 before the object's resourceVersion moves.
	conflicts int
	writes    []fakeWrite
}

type fakeWrite struct {
	key         string
	annotations map[string]string
	dryRun      bool
}

func newFakeObjects(objs ...runtime.Object) *fakeObjects {
	f := &fakeObjects{objects: map[string]*ownerRecord{}}
	for _, o := range objs {
		r, _ := recordOfOwner(o)
		f.objects[r.key()] = r
	}
	return f
}

func (f *fakeObjects) Get(_ context.Context, kind jobs.Kind, namespace, name string) (*ownerRecord, error) {
	r, ok := f.objects[ownerKeyOf(namespace, kind, name)]
	if !ok {
		return nil, apierrors.NewNotFound(infrav1.GroupVersion.WithResource("terraformclusters").GroupResource(), name)
	}
	return r.DeepCopyObject().(*ownerRecord), nil
}

func (f *fakeObjects) Annotate(_ context.Context, kind jobs.Kind, namespace, name, resourceVersion string, annotations map[string]string, dryRun bool) error {
	key := ownerKeyOf(namespace, kind, name)
	r := f.objects[key]
	if f.conflicts > 0 {
		f.conflicts--
		r.ResourceVersion = nextRV()
	}
	if r.ResourceVersion != resourceVersion {
		return apierrors.NewConflict(infrav1.GroupVersion.WithResource("terraformclusters").GroupResource(), name, nil)
	}
	f.writes = append(f.writes, fakeWrite{key: key, annotations: annotations, dryRun: dryRun})
	return nil
}

func TestApprove(t *testing.T) {
	ns := "team-a"
	plan := newJob(ns, "web", jobs.OpPlan, 2, succeeded(t0.Add(-time.Minute)), withResult(jobs.Summary{Plan: &jobs.PlanSummary{Hash: planHash, Destroy: 1}}))
	oldPlan := newJob(ns, "web", jobs.OpPlan, 1, succeeded(t0.Add(-time.Hour)), withResult(jobs.Summary{Plan: &jobs.PlanSummary{Hash: planHash2}}))
	blocked := newJob(ns, "pool", jobs.OpApply, 1, failed(t0), annotated(jobs.AnnotationDestructivePlanBlocked, "true"))
	apply := newJob(ns, "web", jobs.OpApply, 1, succeeded(t0.Add(-2*time.Hour)))
	orphan := newJob(ns, "gone", jobs.OpPlan, 1, succeeded(t0), withResult(jobs.Summary{Plan: &jobs.PlanSummary{Hash: planHash}}))
	web := cluster(ns, "web", nil, &infrav1.PlanPreview{InputsHash: inputsHash, PlanHash: planHash, Job: plan.Name}, nil)
	pool := cluster(ns, "pool", nil, nil, nil)

	tests := []struct {
		name       string
		plan       string
		body       *runs.PlanApproval
		dryRun     bool
		conflicts  int
		wantErr    func(error) bool
		wantInErr  string
		wantCauses []string
		wantWrite  map[string]string
	}{
		{
			name: "the current plan is approved by its hash", plan: plan.Name, body: body(plan.Name, planHash),
			wantWrite: map[string]string{jobs.AnnotationApprovePlan: planHash, jobs.AnnotationApprovedBy: "alice", jobs.AnnotationApprovedAt: t0.Format(time.RFC3339)},
		},
		{
			name: "an empty body name stands for the URL's", plan: plan.Name, body: body("", planHash),
			wantWrite: map[string]string{jobs.AnnotationApprovePlan: planHash, jobs.AnnotationApprovedBy: "alice", jobs.AnnotationApprovedAt: t0.Format(time.RFC3339)},
		},
		{
			name: "a blocked apply is approved by its inputs hash", plan: blocked.Name, body: body(blocked.Name, inputsHash),
			wantWrite: map[string]string{jobs.AnnotationApproveDestructivePlan: inputsHash, jobs.AnnotationApprovedBy: "alice", jobs.AnnotationApprovedAt: t0.Format(time.RFC3339)},
		},
		{
			name: "a dry run decides and checks but is marked so", plan: plan.Name, body: body(plan.Name, planHash), dryRun: true,
			wantWrite: map[string]string{jobs.AnnotationApprovePlan: planHash, jobs.AnnotationApprovedBy: "alice", jobs.AnnotationApprovedAt: t0.Format(time.RFC3339)},
		},
		{
			name: "an object that changed once is decided again and written", plan: plan.Name, body: body(plan.Name, planHash), conflicts: 1,
			wantWrite: map[string]string{jobs.AnnotationApprovePlan: planHash, jobs.AnnotationApprovedBy: "alice", jobs.AnnotationApprovedAt: t0.Format(time.RFC3339)},
		},
		{name: "an object that keeps changing is a conflict", plan: plan.Name, body: body(plan.Name, planHash), conflicts: 2, wantErr: apierrors.IsConflict, wantInErr: "changed while the approval was being written"},
		{name: "another hash is a conflict", plan: plan.Name, body: body(plan.Name, planHash2), wantErr: apierrors.IsConflict, wantInErr: "has hash " + planHash + ", not " + planHash2},
		{name: "a superseded plan is a conflict", plan: oldPlan.Name, body: body(oldPlan.Name, planHash2), wantErr: apierrors.IsConflict, wantInErr: "is not the current plan of TerraformCluster web"},
		{name: "an unknown plan is not found", plan: "nope", body: body("nope", planHash), wantErr: apierrors.IsNotFound},
		{name: "a run without a plan is not found", plan: apply.Name, body: body(apply.Name, planHash), wantErr: apierrors.IsNotFound, wantInErr: "carries no plan"},
		{name: "a plan whose object is gone is not found", plan: orphan.Name, body: body(orphan.Name, planHash), wantErr: apierrors.IsNotFound, wantInErr: "TerraformCluster gone, which does not exist"},
		{name: "another name in the body is invalid", plan: plan.Name, body: body("other", planHash), wantErr: apierrors.IsInvalid, wantCauses: []string{"metadata.name"}},
		{name: "a missing hash is invalid", plan: plan.Name, body: body(plan.Name, ""), wantErr: apierrors.IsInvalid, wantCauses: []string{"spec.planHash"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := newTestSource(t, plan, oldPlan, blocked, apply, orphan, web, pool)
			objects := newFakeObjects(web, pool)
			objects.conflicts = tt.conflicts
			storage := NewApprovalREST(src, objects, nil)
			ctx := genericapirequest.WithNamespace(context.Background(), ns)
			ctx = genericapirequest.WithUser(ctx, &user.DefaultInfo{Name: "alice"})
			opts := &metav1.CreateOptions{}
			if tt.dryRun {
				opts.DryRun = []string{metav1.DryRunAll}
			}
			obj, err := storage.Create(ctx, tt.plan, tt.body, nil, opts)
			if tt.wantErr != nil {
				if !tt.wantErr(err) || !strings.Contains(errString(err), tt.wantInErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantInErr)
				}
				for i, c := range tt.wantCauses {
					if causes := err.(apierrors.APIStatus).Status().Details.Causes; len(causes) <= i || causes[i].Field != c {
						t.Errorf("causes = %+v, want field %s", causes, c)
					}
				}
				if len(objects.writes) != 0 {
					t.Errorf("wrote %+v", objects.writes)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(objects.writes) != 1 || objects.writes[0].dryRun != tt.dryRun || !equalMaps(objects.writes[0].annotations, tt.wantWrite) {
				t.Fatalf("writes = %+v, want %v (dry run %v)", objects.writes, tt.wantWrite, tt.dryRun)
			}
			got := obj.(*runs.PlanApproval)
			if got.Name != tt.plan || got.Status.ApprovedBy != "alice" || !equalMaps(got.Status.Annotations, tt.wantWrite) || got.Status.Target == nil || got.Status.Message == "" {
				t.Errorf("response = %+v", got)
			}
		})
	}
}

func TestApproveRunsAdmissionValidation(t *testing.T) {
	plan := newJob("ns", "web", jobs.OpPlan, 1, succeeded(t0), withResult(jobs.Summary{Plan: &jobs.PlanSummary{Hash: planHash}}))
	web := cluster("ns", "web", nil, &infrav1.PlanPreview{PlanHash: planHash, Job: plan.Name}, nil)
	src := newTestSource(t, plan, web)
	objects := newFakeObjects(web)
	denied := apierrors.NewForbidden(runs.Resource("plans"), plan.Name, nil)
	_, err := NewApprovalREST(src, objects, nil).Create(genericapirequest.WithNamespace(context.Background(), "ns"), plan.Name, body(plan.Name, planHash),
		func(context.Context, runtime.Object) error { return denied }, &metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || len(objects.writes) != 0 {
		t.Fatalf("err = %v, writes %v", err, objects.writes)
	}
}

func TestApproveReadsAJobTheCacheHasNotSeen(t *testing.T) {
	plan := newJob("ns", "web", jobs.OpPlan, 1, succeeded(t0), withResult(jobs.Summary{Plan: &jobs.PlanSummary{Hash: planHash}}))
	web := cluster("ns", "web", nil, &infrav1.PlanPreview{PlanHash: planHash, Job: plan.Name}, nil)
	src := newTestSource(t, web)
	objects := newFakeObjects(web)
	live := fakeJobs{plan.Name: plan}
	ctx := genericapirequest.WithNamespace(context.Background(), "ns")
	if _, err := NewApprovalREST(src, objects, live).Create(ctx, plan.Name, body(plan.Name, planHash), nil, &metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(objects.writes) != 1 {
		t.Fatalf("writes = %v", objects.writes)
	}
}

type fakeJobs map[string]*batchv1.Job

func (f fakeJobs) Get(_ context.Context, _, name string) (*jobRecord, error) {
	if j, ok := f[name]; ok {
		return recordOfJob(j), nil
	}
	return nil, apierrors.NewNotFound(batchv1.Resource("jobs"), name)
}

func body(name, hash string) *runs.PlanApproval {
	return &runs.PlanApproval{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: runs.PlanApprovalSpec{PlanHash: hash}}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

// Package approvals applies the install's admission policy for approval annotations
// (artifacts/policy) and the RBAC of artifacts/ to a real kube-apiserver, and writes approval
// annotations as each identity would: an editor, a cluster admin, and the ServiceAccounts of the
// runs API server and of the controller (by impersonation). Each row is one rule of who may add,
// change or remove an approval, or change what one binds: a plan Job, which no policy guards,
// as its own signature does.
package approvals

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/runkey"
	"github.com/captf/captf/registry"
	"github.com/captf/captf/test/reliability/rel"
	"github.com/captf/captf/test/testenv"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{}))
}

const (
	ns        = "team"
	planHash  = "p2:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	otherHash = "p2:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	inputs    = "h1:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
	image     = "registry.example/modules/net:v1"
	// editorRole gives editors the captf kinds, as a platform aggregates them to edit.
	editorRole = "terraform-editor"
)

// identity is whom a request is made as.
type identity struct {
	user   string
	groups []string
}

func serviceAccount(namespace, name string) identity {
	return identity{"system:serviceaccount:" + namespace + ":" + name, []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}}
}

var (
	editor       = identity{"editor", []string{"system:authenticated"}}
	clusterAdmin = identity{"cluster-admin", []string{"system:masters", "system:authenticated"}}
	apiserver    = serviceAccount("captf-system", "captf-apiserver")
	ctrl         = serviceAccount("captf-system", "captf-controller")
	impostor     = identity{"system:serviceaccount:" + ns + ":captf-apiserver", []string{"system:masters", "system:authenticated"}}
	approvalOf   = func(hash string) map[string]string {
		return map[string]string{jobs.AnnotationApprovePlan: hash, jobs.AnnotationApprovedBy: "alice", jobs.AnnotationApprovedAt: "2026-01-02T03:04:05Z"}
	}
)

// setup installs the namespace, the RBAC and the policy, binds the editor and waits until the
// aggregation has given edit the captf kinds and the policy denies.
func setup(t *testing.T) (admin client.Client, as func(identity) client.Client) {
	t.Helper()
	env := testenv.Get(t)
	ctx := t.Context()
	if err := env.ApplyManifests(ctx,
		filepath.Join(env.RepoRoot, "artifacts/controller/namespace.yaml"),
		filepath.Join(env.RepoRoot, "artifacts/apiserver/serviceaccount.yaml"),
		filepath.Join(env.RepoRoot, "artifacts/apiserver/rbac.yaml"),
		filepath.Join(env.RepoRoot, "artifacts/controller/rbac.yaml"),
		filepath.Join(env.RepoRoot, "artifacts/policy/approvals.yaml"),
	); err != nil {
		t.Fatal(err)
	}
	stop, err := env.StartClusterRoleAggregation(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	as = func(who identity) client.Client {
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: who.user, Groups: who.groups}
		c, err := client.New(cfg, client.Options{Scheme: controller.NewScheme()})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	admin, err = client.New(env.Config, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	kinds := []string{"terraformclusters", "terraformmachines", "terraformmachinepools", "terraformclustertemplates", "terraformmachinetemplates", "terraformmachinepooltemplates"}
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: editorRole, Labels: map[string]string{"rbac.authorization.k8s.io/aggregate-to-edit": "true"}},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{infrav1.GroupVersion.Group}, Resources: kinds, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}},
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "editor", Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: editor.user}},
		},
	} {
		if err := admin.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	kube := kubernetes.NewForConfigOrDie(env.Config)
	if err := rel.Poll(60*time.Second, func() (bool, error) {
		sar, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: editor.user, Groups: editor.groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "patch", Group: infrav1.GroupVersion.Group, Resource: "terraformclusters"},
		}}, metav1.CreateOptions{})
		return err == nil && sar.Status.Allowed, err
	}); err != nil {
		t.Fatalf("edit never got the captf kinds: %v", err)
	}
	// The API server loads policies in the background: a dry run shows when this one denies.
	probe := cluster("probe", nil)
	if err := admin.Create(ctx, probe); err != nil {
		t.Fatal(err)
	}
	if err := rel.Poll(60*time.Second, func() (bool, error) {
		err := admin.Patch(ctx, probe, annotationsPatch(approvalOf(planHash)), client.DryRunAll)
		return denied(err) == nil, err
	}); err != nil {
		t.Fatalf("the policy never denied: %v", err)
	}
	return admin, as
}

func cluster(name string, annotations map[string]string) *infrav1.TerraformCluster {
	tc := &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations}}
	tc.Spec.Source.Image = image
	tc.Spec.Variables = &apiextensionsv1.JSON{Raw: []byte(`{"region":"eu"}`)}
	return tc
}

func machine(name string, annotations map[string]string) *infrav1.TerraformMachine {
	tm := &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations}}
	tm.Spec.Source.Image = image
	return tm
}

func pool(name string, annotations map[string]string) *infrav1.TerraformMachinePool {
	tp := &infrav1.TerraformMachinePool{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations}}
	tp.Spec.Source.Image = image
	return tp
}

func clusterTemplate(name string, annotations map[string]string) *infrav1.TerraformClusterTemplate {
	tt := &infrav1.TerraformClusterTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	tt.Spec.Template.ObjectMeta.Annotations = annotations
	tt.Spec.Template.Spec.Source.Image = image
	return tt
}

func machineTemplate(name string, annotations map[string]string) *infrav1.TerraformMachineTemplate {
	tt := &infrav1.TerraformMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	tt.Spec.Template.ObjectMeta.Annotations = annotations
	tt.Spec.Template.Spec.Source.Image = image
	return tt
}

func poolTemplate(name string, annotations map[string]string) *infrav1.TerraformMachinePoolTemplate {
	tt := &infrav1.TerraformMachinePoolTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	tt.Spec.Template.ObjectMeta.Annotations = annotations
	tt.Spec.Template.Spec.Source.Image = image
	return tt
}

// annotationsPatch is a JSON merge patch of an object's annotations; "" removes one.
func annotationsPatch(annotations map[string]string) client.Patch {
	return client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":%s}}`, mergeMap(annotations))))
}

// templateAnnotationsPatch is a JSON merge patch of a template's spec.template.metadata.annotations.
func templateAnnotationsPatch(annotations map[string]string) client.Patch {
	return client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":%s}}}}`, mergeMap(annotations))))
}

func mergeMap(annotations map[string]string) string {
	var parts []string
	for k, v := range annotations {
		value := fmt.Sprintf("%q", v)
		if v == "" {
			value = "null"
		}
		parts = append(parts, fmt.Sprintf("%q:%s", k, value))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// denied says what is wrong unless err is the policy's denial.
func denied(err error) error {
	switch {
	case err == nil:
		return errors.New("allowed")
	case !apierrors.IsForbidden(err):
		return fmt.Errorf("not Forbidden: %w", err)
	case !strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+workspace.ApprovalPolicyName+"'"):
		return fmt.Errorf("not the policy's denial: %w", err)
	}
	return nil
}

func TestApprovalsAreWrittenOnlyByTheRunsAPIServer(t *testing.T) {
	admin, as := setup(t)
	ctx := t.Context()
	// The policy reads the request's user: an editor must not be able to become one of captf's
	// ServiceAccounts. (edit may impersonate, and make tokens of, its own namespace's only.)
	kube := kubernetes.NewForConfigOrDie(testenv.Get(t).Config)
	for _, attrs := range []authorizationv1.ResourceAttributes{
		{Verb: "impersonate", Resource: "serviceaccounts", Namespace: "captf-system", Name: "captf-apiserver"},
		{Verb: "impersonate", Resource: "users", Name: apiserver.user},
		{Verb: "create", Resource: "serviceaccounts", Subresource: "token", Namespace: "captf-system", Name: "captf-apiserver"},
		{Verb: "create", Resource: "serviceaccounts", Subresource: "token", Namespace: "captf-system", Name: "captf-controller"},
	} {
		sar, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: editor.user, Groups: editor.groups, ResourceAttributes: &attrs,
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed {
			t.Fatalf("the editor may %s %s/%s %s/%s", attrs.Verb, attrs.Resource, attrs.Subresource, attrs.Namespace, attrs.Name)
		}
	}
	for i, tc := range []struct {
		rule string
		as   identity
		// object is the object of the row, named as given; approved objects carry the
		// approval the runs API server wrote before the row.
		object   func(name string) client.Object
		approved bool
		// create creates object as the identity; otherwise patch is applied to it.
		create bool
		patch  client.Patch
		// field is the path the denial names; "" when the request is allowed.
		field string
		// prepare finishes object once the admin has created it; then checks what an allowed
		// request left.
		prepare, then func(t *testing.T, obj client.Object)
	}{
		{rule: "an editor may not write captf.io/approve-plan",
			as: editor, object: func(n string) client.Object { return cluster(n, nil) },
			patch: annotationsPatch(map[string]string{jobs.AnnotationApprovePlan: planHash}), field: "metadata.annotations[captf.io/approve-plan]"},
		{rule: "an editor may not write captf.io/approved-by alone",
			as: editor, object: func(n string) client.Object { return cluster(n, nil) },
			patch: annotationsPatch(map[string]string{jobs.AnnotationApprovedBy: "alice"}), field: "metadata.annotations[captf.io/approved-by]"},
		{rule: "an editor may not approve a destructive plan of a pool",
			as: editor, object: func(n string) client.Object { return pool(n, nil) },
			patch: annotationsPatch(map[string]string{jobs.AnnotationApproveDestructivePlan: inputs}), field: "metadata.annotations[captf.io/approve-destructive-plan]"},
		{rule: "an editor may not write an approval on a machine",
			as: editor, object: func(n string) client.Object { return machine(n, nil) },
			patch: annotationsPatch(map[string]string{jobs.AnnotationApproveDestructivePlan: inputs}), field: "metadata.annotations[captf.io/approve-destructive-plan]"},
		{rule: "an editor may not create an object that carries an approval",
			as: editor, create: true, object: func(n string) client.Object {
				return cluster(n, map[string]string{jobs.AnnotationApproveDestructivePlan: inputs})
			}, field: "metadata.annotations[captf.io/approve-destructive-plan]"},
		{rule: "an editor may not change who approved",
			as: editor, approved: true, object: func(n string) client.Object { return cluster(n, nil) },
			patch: annotationsPatch(map[string]string{jobs.AnnotationApprovedBy: "mallory"}), field: "metadata.annotations[captf.io/approved-by]"},
		{rule: "an editor may not change the approved hash",
			as: editor, approved: true, object: func(n string) client.Object { return cluster(n, nil) },
			patch: annotationsPatch(map[string]string{jobs.AnnotationApprovePlan: otherHash}), field: "metadata.annotations[captf.io/approve-plan]"},
		{rule: "an editor may not remove an approval",
			as: editor, approved: true, object: func(n string) client.Object { return cluster(n, nil) },
			patch: annotationsPatch(map[string]string{jobs.AnnotationApprovePlan: ""}), field: "metadata.annotations[captf.io/approve-plan]"},
		{rule: "an editor may still change the spec and other annotations of an approved object",
			as: editor, approved: true, object: func(n string) client.Object { return cluster(n, nil) },
			patch: client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"team":"web"}},"spec":{"variables":{"region":"us"}}}`))},
		{rule: "an editor may create an object without an approval",
			as: editor, create: true, object: func(n string) client.Object { return cluster(n, map[string]string{"team": "web"}) }},
		{rule: "a cluster admin may not write an approval either",
			as: clusterAdmin, object: func(n string) client.Object { return cluster(n, nil) },
			patch: annotationsPatch(approvalOf(planHash)), field: "metadata.annotations[captf.io/approve"},
		{rule: "a ServiceAccount of the API server's name in another namespace may not write an approval",
			as: impostor, object: func(n string) client.Object { return cluster(n, nil) },
			patch: annotationsPatch(approvalOf(planHash)), field: "metadata.annotations[captf.io/approve"},
		{rule: "the runs API server's ServiceAccount writes an approval",
			as: apiserver, object: func(n string) client.Object { return cluster(n, nil) },
			patch: annotationsPatch(approvalOf(planHash))},
		{rule: "the runs API server's ServiceAccount replaces an approval",
			as: apiserver, approved: true, object: func(n string) client.Object { return cluster(n, nil) },
			patch: annotationsPatch(approvalOf(otherHash))},
		{rule: "the runs API server's ServiceAccount approves a destructive plan of a pool",
			as: apiserver, object: func(n string) client.Object { return pool(n, nil) },
			patch: annotationsPatch(map[string]string{jobs.AnnotationApproveDestructivePlan: inputs, jobs.AnnotationApprovedBy: "alice"})},
		{rule: "the controller's ServiceAccount removes the approval an apply consumed",
			as: ctrl, approved: true, object: func(n string) client.Object { return cluster(n, nil) },
			patch: annotationsPatch(map[string]string{jobs.AnnotationApprovePlan: "", jobs.AnnotationApprovedBy: "", jobs.AnnotationApprovedAt: ""})},
		{rule: "the controller's ServiceAccount may not write an approval",
			as: ctrl, object: func(n string) client.Object { return cluster(n, nil) },
			patch: annotationsPatch(map[string]string{jobs.AnnotationApprovePlan: planHash}), field: "metadata.annotations[captf.io/approve-plan]"},
		{rule: "the controller's ServiceAccount may not change who approved",
			as: ctrl, approved: true, object: func(n string) client.Object { return cluster(n, nil) },
			patch: annotationsPatch(map[string]string{jobs.AnnotationApprovedBy: "controller"}), field: "metadata.annotations[captf.io/approved-by]"},
		{rule: "an editor may not put an approval into a cluster template",
			as: editor, object: func(n string) client.Object { return clusterTemplate(n, nil) },
			patch: templateAnnotationsPatch(map[string]string{jobs.AnnotationApprovePlan: planHash}), field: "spec.template.metadata.annotations[captf.io/approve-plan]"},
		{rule: "an editor may not create a machine template that carries an approval",
			as: editor, create: true, object: func(n string) client.Object {
				return machineTemplate(n, map[string]string{jobs.AnnotationApproveDestructivePlan: inputs})
			}, field: "spec.template.metadata.annotations[captf.io/approve-destructive-plan]"},
		{rule: "a cluster admin may not put an approval into a pool template",
			as: clusterAdmin, object: func(n string) client.Object { return poolTemplate(n, nil) },
			patch: templateAnnotationsPatch(map[string]string{jobs.AnnotationApprovedBy: "alice"}), field: "spec.template.metadata.annotations[captf.io/approved-by]"},
		{rule: "an editor may change a template's other annotations",
			as: editor, object: func(n string) client.Object { return clusterTemplate(n, nil) },
			patch: templateAnnotationsPatch(map[string]string{"team": "web"})},
		{rule: "an editor may rewrite a plan Job's result, which no policy guards: the plan no longer verifies and is not approved",
			as: editor, object: planJob, prepare: func(t *testing.T, obj client.Object) { finishAndSign(t, admin, obj) },
			patch: annotationsPatch(map[string]string{jobs.AnnotationResult: hiddenDelete(t)}),
			then:  func(t *testing.T, obj client.Object) { wantApproval(t, admin, obj, jobs.ApprovalConflict) }},
		{rule: "a plan Job given an annotation of another domain still verifies and is approved",
			as: editor, object: planJob, prepare: func(t *testing.T, obj client.Object) { finishAndSign(t, admin, obj) },
			patch: annotationsPatch(map[string]string{"team": "web"}),
			then:  func(t *testing.T, obj client.Object) { wantApproval(t, admin, obj, jobs.ApprovalAllowed) }},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			obj := tc.object(fmt.Sprintf("row-%d", i))
			c := as(tc.as)
			var err error
			if tc.create {
				err = c.Create(ctx, obj)
			} else {
				if err := admin.Create(ctx, obj); err != nil {
					t.Fatal(err)
				}
				if tc.prepare != nil {
					tc.prepare(t, obj)
				}
				if tc.approved {
					if err := as(apiserver).Patch(ctx, obj, annotationsPatch(approvalOf(planHash))); err != nil {
						t.Fatalf("the runs API server's approval: %v", err)
					}
				}
				err = c.Patch(ctx, obj, tc.patch)
			}
			if tc.field == "" {
				if err != nil {
					t.Fatalf("%s: %v, want it allowed", tc.as.user, err)
				}
				if tc.then != nil {
					tc.then(t, obj)
				}
				return
			}
			if why := denied(err); why != nil {
				t.Fatalf("%s: %v", tc.as.user, why)
			}
			for _, want := range []string{tc.field, "kubectl captf approve PLAN", "plans/PLAN/approval"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the denial lacks %q: %v", want, err)
				}
			}
		})
	}
}

// runKey is the run key the rows' plan Jobs are signed with, as the controller signs its Jobs.
var runKey = func() runkey.Key {
	key, err := runkey.Of([]byte(strings.Repeat("k", runkey.Size)))
	if err != nil {
		panic(err)
	}
	return key
}()

// planJob is a plan Job of a TerraformCluster web that planned a replacement, which deletes;
// finishAndSign completes it.
func planJob(name string) client.Object {
	summary, err := jobs.EncodeSummary(jobs.Summary{Outcome: jobs.OutcomeSucceeded, Plan: &jobs.PlanSummary{
		Hash: planHash, Add: 1, Destroy: 1, Destructive: true,
		Resources: []jobs.ResourceChange{{Address: "terraform_data.net", Actions: []string{"delete", "create"}}},
	}})
	if err != nil {
		panic(err)
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns, Labels: jobs.Labels(jobs.KindCluster, "web", "", jobs.OpPlan, 1),
			Annotations: map[string]string{jobs.AnnotationInputsHash: inputs, jobs.AnnotationResult: summary, jobs.AnnotationBookkept: "true"},
		},
		Spec: batchv1.JobSpec{Suspend: ptr.To(true), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "runner", Image: image}},
		}}},
	}
}

// hiddenDelete is the result of planJob as someone who may patch Jobs rewrites it: the same
// hash, which the approval binds, with the replacement shown as an update.
func hiddenDelete(t *testing.T) string {
	v, err := jobs.EncodeSummary(jobs.Summary{Outcome: jobs.OutcomeSucceeded, Plan: &jobs.PlanSummary{
		Hash: planHash, Change: 1, Resources: []jobs.ResourceChange{{Address: "terraform_data.net", Actions: []string{"update"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// finishAndSign writes the plan Job's status as the Job controller would, then the result's
// digest and the signature, as the controller's bookkeeping does.
func finishAndSign(t *testing.T, admin client.Client, obj client.Object) {
	t.Helper()
	job := obj.(*batchv1.Job)
	now := metav1.Now()
	job.Status = batchv1.JobStatus{StartTime: &now, CompletionTime: &now, Succeeded: 1, Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonCompletionsReached, LastTransitionTime: now},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonCompletionsReached, LastTransitionTime: now},
	}}
	if err := admin.Status().Update(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	job.Annotations[runkey.AnnotationResultDigest] = runkey.ResultDigest(job.Annotations[jobs.AnnotationResult])
	job.Annotations[runkey.AnnotationSignature] = runKey.SignJob(job)
	if err := admin.Update(t.Context(), job); err != nil {
		t.Fatal(err)
	}
}

// wantApproval reads the plan Job back from the API server and decides an approval of its hash
// as the runs API server does, with its check of the Job.
func wantApproval(t *testing.T, admin client.Client, obj client.Object, want jobs.ApprovalVerdict) {
	t.Helper()
	var job batchv1.Job
	if err := admin.Get(t.Context(), client.ObjectKeyFromObject(obj), &job); err != nil {
		t.Fatal(err)
	}
	owner := registry.PlanOwnerOf(nil, &jobs.CurrentPlan{InputsHash: inputs, PlanHash: planHash, Job: job.Name})
	owner.Verify = registry.PlanVerifier(runKey)
	d := jobs.PlanApprovalCheck(&job, []batchv1.Job{job}, owner, planHash, "alice", time.Now())
	if d.Verdict != want {
		t.Errorf("approval of the plan as stored: %s (%s), want %s", d.Verdict, d.Message, want)
	}
}

package aggregated

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/jobs"
)

// user is a client-certificate user of the control plane bound to a ClusterRole in one
// namespace.
type user struct {
	name       string
	kubeconfig string
	config     *rest.Config
}

func newUser(t *testing.T, c clients, ns, name, clusterRole string) user {
	t.Helper()
	cfg, kubeconfig, err := getEnv(t).AddUser(name)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.kube.RbacV1().RoleBindings(ns).Create(t.Context(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-" + clusterRole, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return user{name: name, kubeconfig: kubeconfig, config: cfg}
}

// can asks kube-apiserver whether the user may do verb on resource in ns.
func (u user) can(t *testing.T, verb, resource, ns string) bool {
	t.Helper()
	args := []string{"--kubeconfig=" + u.kubeconfig, "auth", "can-i", verb, resource, "-n", ns}
	if r, sub, ok := strings.Cut(resource, "/"); ok {
		args = []string{"--kubeconfig=" + u.kubeconfig, "auth", "can-i", verb, r, "--subresource=" + sub, "-n", ns}
	}
	out, _ := kubectl(t, args...)
	return strings.TrimSpace(out) == "yes"
}

// approve POSTs a PlanApproval body to the plan's approval subresource through the aggregator
// and returns the HTTP status code and the body of the answer.
func (u user) approve(t *testing.T, ns, plan, body string, dryRun bool) (int, string) {
	t.Helper()
	cfg := rest.CopyConfig(u.config)
	cfg.GroupVersion = &schema.GroupVersion{Group: "runs.captf.io", Version: "v1alpha1"}
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme.Scheme).WithoutConversion()
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req := rc.Post().Namespace(ns).Resource("plans").Name(plan).SubResource("approval").SetHeader("Content-Type", "application/json").Body([]byte(body))
	if dryRun {
		req = req.Param("dryRun", "All")
	}
	var code int
	raw, _ := req.Do(t.Context()).StatusCode(&code).Raw()
	return code, string(raw)
}

func approvalBody(name, hash string) string {
	return fmt.Sprintf(`{"apiVersion":"runs.captf.io/v1alpha1","kind":"PlanApproval","metadata":{"name":%q},"spec":{"planHash":%q}}`, name, hash)
}

// planFixture is a TerraformCluster under applyPolicy Manual with an older, superseded plan
// and the current plan that awaits approval.
type planFixture struct {
	ns                  string
	cluster             *infrav1.TerraformCluster
	current, superseded string
}

func newPlanFixture(t *testing.T, c clients) planFixture {
	t.Helper()
	ns := c.newNamespace(t)
	web := c.createCluster(t, ns, "web", nil)
	old := c.createJob(t, web, jobs.OpPlan, 1, nil)
	c.setJob(t, old, jobSucceeded, time.Now().Add(-time.Hour), resultAnnotations(t, jobs.Summary{Plan: &jobs.PlanSummary{Hash: planHash2, Add: 1}}))
	cur := c.createJob(t, web, jobs.OpPlan, 2, nil)
	c.setJob(t, cur, jobSucceeded, time.Now(), resultAnnotations(t, jobs.Summary{Plan: &jobs.PlanSummary{
		Hash: planHash, Destroy: 1, Destructive: true, Resources: []jobs.ResourceChange{{Address: "terraform_data.net", Actions: []string{"delete", "create"}}},
	}}))
	if err := c.infra.Get(t.Context(), client.ObjectKeyFromObject(web), web); err != nil {
		t.Fatal(err)
	}
	web.Status.Plan = &infrav1.PlanPreview{InputsHash: inputsHash, Job: cur.Name, PlanHash: planHash, Destroy: 1}
	if err := c.infra.Status().Update(t.Context(), web); err != nil {
		t.Fatal(err)
	}
	f := planFixture{ns: ns, cluster: web, current: cur.Name, superseded: old.Name}
	eventually(t, 10*time.Second, func(context.Context) error {
		out, err := kubectl(t, "get", "plans", "-n", ns, "-o", "jsonpath={range .items[*]}{.metadata.name}={.status.phase} {end}")
		if err != nil {
			return fmt.Errorf("plans: %w %s", err, out)
		}
		if !strings.Contains(out, cur.Name+"=AwaitingApproval") || !strings.Contains(out, old.Name+"=Superseded") {
			return fmt.Errorf("plans: %s", out)
		}
		return nil
	})
	return f
}

// annotationsOf reads the TerraformCluster's approval annotations.
func (f planFixture) annotationsOf(t *testing.T, c clients) map[string]string {
	t.Helper()
	var obj infrav1.TerraformCluster
	if err := c.infra.Get(t.Context(), client.ObjectKeyFromObject(f.cluster), &obj); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range []string{jobs.AnnotationApprovePlan, jobs.AnnotationApproveDestructivePlan, jobs.AnnotationApprovedBy, jobs.AnnotationApprovedAt} {
		if v, ok := obj.Annotations[k]; ok {
			out[k] = v
		}
	}
	return out
}

// waitForRBAC waits until kube-apiserver's authorizer gives u the answer want, which for the
// aggregated view/edit roles needs the ClusterRole aggregation controller to have run.
func waitForRBAC(t *testing.T, u user, verb, resource, ns string, want bool) {
	t.Helper()
	eventually(t, 30*time.Second, func(context.Context) error {
		if got := u.can(t, verb, resource, ns); got != want {
			return fmt.Errorf("%s can %s %s: %v, want %v", u.name, verb, resource, got, want)
		}
		return nil
	})
}

func TestViewerListsRunsButCannotApprove(t *testing.T) {
	c := newClients(t)
	f := newPlanFixture(t, c)
	viewer := newUser(t, c, f.ns, "viewer-"+f.ns, "view")
	waitForRBAC(t, viewer, "list", "runs.runs.captf.io", f.ns, true)

	out, err := kubectl(t, "--kubeconfig="+viewer.kubeconfig, "get", "runs", "-n", f.ns, "-o", "name")
	if err != nil || !strings.Contains(out, f.current) {
		t.Fatalf("the viewer cannot list runs: %v\n%s", err, out)
	}
	if out, err := kubectl(t, "--kubeconfig="+viewer.kubeconfig, "get", "plans", "-n", f.ns); err == nil || !strings.Contains(out, "Forbidden") {
		t.Errorf("the viewer lists plans, which only edit may: %v\n%s", err, out)
	}
	code, body := viewer.approve(t, f.ns, f.current, approvalBody(f.current, planHash), false)
	if code != http.StatusForbidden || !strings.Contains(body, "plans/approval") {
		t.Errorf("approval by a viewer: %d %s, want 403", code, body)
	}
	if got := f.annotationsOf(t, c); len(got) != 0 {
		t.Errorf("annotations after a refused approval: %v", got)
	}
}

func TestApproverWithoutEditRightsApproves(t *testing.T) {
	c := newClients(t)
	f := newPlanFixture(t, c)
	approver := newUser(t, c, f.ns, "approver-"+f.ns, "captf-plan-approver")
	waitForRBAC(t, approver, "create", "plans.runs.captf.io/approval", f.ns, true)
	if approver.can(t, "patch", "terraformclusters.infrastructure.cluster.x-k8s.io", f.ns) || approver.can(t, "update", "terraformclusters.infrastructure.cluster.x-k8s.io", f.ns) {
		t.Fatal("the approver may edit TerraformClusters; the test needs one who may not")
	}
	code, body := approver.approve(t, f.ns, f.current, approvalBody(f.current, planHash), false)
	if code != http.StatusCreated {
		t.Fatalf("approval: %d %s, want 201", code, body)
	}
	for _, want := range []string{`"kind":"PlanApproval"`, `"approvedBy":"` + approver.name + `"`, jobs.AnnotationApprovePlan} {
		if !strings.Contains(body, want) {
			t.Errorf("response lacks %s: %s", want, body)
		}
	}
	got := f.annotationsOf(t, c)
	if got[jobs.AnnotationApprovePlan] != planHash || got[jobs.AnnotationApprovedBy] != approver.name || got[jobs.AnnotationApprovedAt] == "" {
		t.Fatalf("annotations on the TerraformCluster = %v", got)
	}
	eventually(t, 10*time.Second, func(context.Context) error {
		out, err := kubectl(t, "get", "plan", f.current, "-n", f.ns, "-o", "jsonpath={.status.phase} {.status.approvedBy}")
		if err != nil {
			return fmt.Errorf("plan: %w %s", err, out)
		}
		if out != "Approved "+approver.name {
			return fmt.Errorf("plan: %s", out)
		}
		return nil
	})
	// Approving again is idempotent.
	if code, body := approver.approve(t, f.ns, f.current, approvalBody(f.current, planHash), false); code != http.StatusCreated {
		t.Errorf("second approval: %d %s", code, body)
	}
}

// TestEditDoesNotApprove: the edit role, which reads plans, does not approve them; a RoleBinding
// to captf-plan-approver does. Whoever may change a spec would otherwise approve the plan of
// their own change.
func TestEditDoesNotApprove(t *testing.T) {
	c := newClients(t)
	f := newPlanFixture(t, c)
	editor := newUser(t, c, f.ns, "editor-"+f.ns, "edit")
	// Once the editor lists plans, captf-plans-edit is aggregated into edit: the refusal below
	// is the install's, not the aggregation controller's delay.
	waitForRBAC(t, editor, "list", "plans.runs.captf.io", f.ns, true)
	code, body := editor.approve(t, f.ns, f.current, approvalBody(f.current, planHash), false)
	if code != http.StatusForbidden || !strings.Contains(body, "plans/approval") {
		t.Fatalf("approval by an editor: %d %s, want 403", code, body)
	}
	if got := f.annotationsOf(t, c); len(got) != 0 {
		t.Fatalf("annotations after a refused approval: %v", got)
	}

	approver := newUser(t, c, f.ns, "approver-"+f.ns, "captf-plan-approver")
	waitForRBAC(t, approver, "create", "plans.runs.captf.io/approval", f.ns, true)
	if code, body := approver.approve(t, f.ns, f.current, approvalBody(f.current, planHash), false); code != http.StatusCreated {
		t.Fatalf("approval by a captf-plan-approver: %d %s, want 201", code, body)
	}
	if got := f.annotationsOf(t, c); got[jobs.AnnotationApprovedBy] != approver.name {
		t.Fatalf("annotations after the approval = %v, want the plan approved by %s", got, approver.name)
	}
}

// TestApprovalsPassOnlyThroughPlansApproval: with the install's policy in force, a person who
// may edit the TerraformCluster and approve plans cannot write the approval on it, while the
// same approval POSTed to plans/approval passes, written by the server's ServiceAccount.
func TestApprovalsPassOnlyThroughPlansApproval(t *testing.T) {
	c := newClients(t)
	f := newPlanFixture(t, c)
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "terraform-editor", Namespace: f.ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{infrav1.GroupVersion.Group}, Resources: []string{"terraformclusters"}, Verbs: []string{"get", "update", "patch"}}},
	}
	if _, err := c.kube.RbacV1().Roles(f.ns).Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	editor := newUser(t, c, f.ns, "editor-"+f.ns, "edit")
	for name, ref := range map[string]rbacv1.RoleRef{
		"editor-terraform": {APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		"editor-approver":  {APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "captf-plan-approver"},
	} {
		if _, err := c.kube.RbacV1().RoleBindings(f.ns).Create(t.Context(), &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
			RoleRef:    ref,
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: editor.name}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitForRBAC(t, editor, "patch", "terraformclusters.infrastructure.cluster.x-k8s.io", f.ns, true)
	waitForRBAC(t, editor, "create", "plans.runs.captf.io/approval", f.ns, true)
	editorClient, err := client.New(editor.config, client.Options{Scheme: c.infra.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	selfApproval := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:"someone-else"}}}`,
		jobs.AnnotationApprovePlan, planHash, jobs.AnnotationApprovedBy)))
	// The API server loads the policy in the background: once it denies, it is in force.
	eventually(t, 60*time.Second, func(ctx context.Context) error {
		err := editorClient.Patch(ctx, f.cluster.DeepCopy(), selfApproval, client.DryRunAll)
		if err == nil {
			return errors.New("the editor's dry-run self-approval was allowed")
		}
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "metadata.annotations[captf.io/approve-plan]") || !strings.Contains(err.Error(), "kubectl captf approve") {
			return fmt.Errorf("the editor's dry-run self-approval: %w, want the policy's denial", err)
		}
		return nil
	})
	if err := editorClient.Patch(t.Context(), f.cluster.DeepCopy(), selfApproval); !apierrors.IsForbidden(err) {
		t.Fatalf("the editor's self-approval: %v, want 403", err)
	}
	if got := f.annotationsOf(t, c); len(got) != 0 {
		t.Fatalf("annotations after a denied self-approval: %v", got)
	}
	// The editor may still change the object otherwise.
	if err := editorClient.Patch(t.Context(), f.cluster.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"team":"web"}}}`))); err != nil {
		t.Fatalf("the editor's other annotation: %v", err)
	}

	code, body := editor.approve(t, f.ns, f.current, approvalBody(f.current, planHash), false)
	if code != http.StatusCreated {
		t.Fatalf("approval through plans/approval: %d %s, want 201", code, body)
	}
	got := f.annotationsOf(t, c)
	if got[jobs.AnnotationApprovePlan] != planHash || got[jobs.AnnotationApprovedBy] != editor.name {
		t.Fatalf("annotations after the approval = %v, want the plan approved by %s", got, editor.name)
	}
}

func TestApprovalAnswers(t *testing.T) {
	c := newClients(t)
	f := newPlanFixture(t, c)
	approver := newUser(t, c, f.ns, "approver-"+f.ns, "captf-plan-approver")
	waitForRBAC(t, approver, "create", "plans.runs.captf.io/approval", f.ns, true)
	tests := []struct {
		name     string
		plan     string
		body     string
		dryRun   bool
		wantCode int
		wantBody []string
	}{
		{name: "another hash is a conflict that names both", plan: f.current, body: approvalBody(f.current, planHash2), wantCode: http.StatusConflict,
			wantBody: []string{"has hash " + planHash + ", not " + planHash2, "review the plan again"}},
		{name: "a superseded plan is a conflict", plan: f.superseded, body: approvalBody(f.superseded, planHash2), wantCode: http.StatusConflict,
			wantBody: []string{"is not the current plan of TerraformCluster web"}},
		{name: "an unknown plan is not found", plan: "no-such-plan", body: approvalBody("no-such-plan", planHash), wantCode: http.StatusNotFound},
		{name: "a body that is not JSON is a bad request", plan: f.current, body: `{"spec": `, wantCode: http.StatusBadRequest},
		{name: "a missing hash is invalid with its field path", plan: f.current, body: approvalBody(f.current, ""), wantCode: http.StatusUnprocessableEntity,
			wantBody: []string{`"field":"spec.planHash"`}},
		{name: "another name than the URL's is invalid", plan: f.current, body: approvalBody("other", planHash), wantCode: http.StatusUnprocessableEntity,
			wantBody: []string{`"field":"metadata.name"`}},
		{name: "a dry run answers 201 and writes nothing", plan: f.current, body: approvalBody(f.current, planHash), dryRun: true, wantCode: http.StatusCreated,
			wantBody: []string{jobs.AnnotationApprovePlan}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := approver.approve(t, f.ns, tt.plan, tt.body, tt.dryRun)
			if code != tt.wantCode {
				t.Fatalf("status %d, want %d: %s", code, tt.wantCode, body)
			}
			for _, w := range tt.wantBody {
				if !strings.Contains(body, w) {
					t.Errorf("answer lacks %q: %s", w, body)
				}
			}
			if got := f.annotationsOf(t, c); len(got) != 0 {
				t.Errorf("annotations written: %v", got)
			}
		})
	}
}

// createForgedJob creates a Job with the labels and annotations the controller gives a run of
// owner, and the largest attempt a label holds, but without the controller's owner reference:
// what anyone who may create Jobs can make.
func (c clients) createForgedJob(t *testing.T, owner *infrav1.TerraformCluster, op jobs.Op, name string, annotations map[string]string) *batchv1.Job {
	t.Helper()
	labels := jobs.Labels(jobs.KindCluster, owner.Name, "", op, 1)
	labels[jobs.LabelAttempt] = "2147483647"
	all := map[string]string{jobs.AnnotationInputsHash: inputsHash}
	for k, v := range annotations {
		all[k] = v
	}
	job, err := c.kube.BatchV1().Jobs(owner.Namespace).Create(t.Context(), &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: owner.Namespace, Labels: labels, Annotations: all},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Suspend:      ptr.To(true),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "runner", Image: "example.invalid/runner:1"}},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return job
}

// TestOnlyTheControllersOwnJobsCount_ForgedPlanIsNotApproved: Jobs with web's captf labels but
// without the controller's owner reference are no runs of web: the runs API shows neither, the
// real plan's phase stays as it was, and approving the forged plan is a 404 that writes nothing
// on web.
func TestOnlyTheControllersOwnJobsCount_ForgedPlanIsNotApproved(t *testing.T) {
	c := newClients(t)
	f := newPlanFixture(t, c)
	approver := newUser(t, c, f.ns, "approver-"+f.ns, "captf-plan-approver")
	waitForRBAC(t, approver, "create", "plans.runs.captf.io/approval", f.ns, true)

	forgedPlan := c.createForgedJob(t, f.cluster, jobs.OpPlan, "forged-plan", nil)
	c.setJob(t, forgedPlan, jobSucceeded, time.Now(), resultAnnotations(t, jobs.Summary{Plan: &jobs.PlanSummary{Hash: planHash2, Destroy: 9}}))
	// Were it web's, this apply of the real plan would make the plan Applied.
	forgedApply := c.createForgedJob(t, f.cluster, jobs.OpApply, "forged-apply", map[string]string{jobs.AnnotationApprovedPlan: planHash})
	c.setJob(t, forgedApply, jobSucceeded, time.Now(), nil)
	// The server takes Jobs in the order of its watch: once it shows this later run, it has seen
	// the forged Jobs too.
	marker := c.createJob(t, f.cluster, jobs.OpRefresh, 1, nil)
	eventually(t, 10*time.Second, func(context.Context) error {
		out, err := kubectl(t, "get", "runs", "-n", f.ns, "-o", "name")
		if err != nil {
			return fmt.Errorf("runs: %w %s", err, out)
		}
		if !strings.Contains(out, marker.Name) {
			return fmt.Errorf("runs: %s", out)
		}
		return nil
	})

	for _, resource := range []string{"runs", "plans"} {
		out := mustKubectl(t, "get", resource, "-n", f.ns, "-o", "name")
		if strings.Contains(out, "forged-") {
			t.Errorf("%s show a forged Job:\n%s", resource, out)
		}
	}
	if out := mustKubectl(t, "get", "plan", f.current, "-n", f.ns, "-o", "jsonpath={.status.phase}"); out != "AwaitingApproval" {
		t.Errorf("the real plan is %s among forged Jobs, want AwaitingApproval", out)
	}
	code, body := approver.approve(t, f.ns, forgedPlan.Name, approvalBody(forgedPlan.Name, planHash2), false)
	if code != http.StatusNotFound || !strings.Contains(body, "has no controller owner reference") {
		t.Errorf("approval of the forged plan: %d %s, want 404 that says why", code, body)
	}
	if got := f.annotationsOf(t, c); len(got) != 0 {
		t.Errorf("annotations written on %s: %v", f.cluster.Name, got)
	}
}

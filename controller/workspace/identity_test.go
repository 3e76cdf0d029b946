package workspace_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
)

// identity creates a TerraformClusterIdentity named after the harness's namespace, whose Secret
// lives in a namespace of its own, the controller's.
func (h *harness) identity(allowed *infrav1.AllowedNamespaces, data map[string]string) *infrav1.TerraformClusterIdentity {
	h.t.Helper()
	home := h.ns + "-identities"
	if err := h.c.Create(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: home}}); err != nil {
		h.t.Fatal(err)
	}
	h.r.ControllerNamespace = home
	if data != nil {
		if err := h.c.Create(h.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cloud", Namespace: home}, StringData: data}); err != nil {
			h.t.Fatal(err)
		}
	}
	id := &infrav1.TerraformClusterIdentity{
		ObjectMeta: metav1.ObjectMeta{Name: h.ns + "-cloud"},
		Spec: infrav1.TerraformClusterIdentitySpec{SecretRef: infrav1.SecretReference{Name: "cloud", Namespace: home}, AllowedNamespaces: allowed,
			AllowedImages: []string{jobs.Repository(image)}},
	}
	if err := h.c.Create(h.ctx, id); err != nil {
		h.t.Fatal(err)
	}
	return id
}

func withIdentity(name string) func(*infrav1.TerraformCluster) {
	return func(tc *infrav1.TerraformCluster) { tc.Spec.IdentityRef = &infrav1.IdentityReference{Name: name} }
}

func (h *harness) wantIdentity(obj infrav1.Workspace, status metav1.ConditionStatus, reason string) {
	h.t.Helper()
	h.get(obj)
	c := conditions.Get(obj.WorkspaceStatus().Conditions, conditions.IdentityAllowed)
	if c == nil || c.Status != status || c.Reason != reason {
		h.t.Fatalf("IdentityAllowed = %+v, want %s/%s", c, status, reason)
	}
}

func TestAnIdentityLendsItsCredentialsThroughACopyInTheNamespace(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	id := h.identity(&infrav1.AllowedNamespaces{List: []string{h.ns}}, map[string]string{"AWS_ACCESS_KEY_ID": "AKIA1", "TF_CLI_ARGS": "-x"})
	tc := h.cluster("web", withIdentity(id.Name))
	h.settle(tc)
	h.wantIdentity(tc, metav1.ConditionTrue, conditions.ReasonIdentityAllowed)

	job := h.runningJob(jobs.KindCluster, "web")
	mirrorName := workspace.MirrorName(id.Name)
	source := job.Spec.Template.Spec.Containers[0]
	if len(source.EnvFrom) != 1 || source.EnvFrom[0].SecretRef.Name != mirrorName {
		t.Fatalf("the Job's envFrom = %+v, want the copy %s", source.EnvFrom, mirrorName)
	}
	mirror := h.secret(mirrorName)
	if mirror == nil || string(mirror.Data["AWS_ACCESS_KEY_ID"]) != "AKIA1" || mirror.Labels[workspace.LabelMirrored] != "true" ||
		len(mirror.OwnerReferences) != 1 || mirror.OwnerReferences[0].UID != tc.UID || mirror.OwnerReferences[0].Controller != nil {
		t.Fatalf("the copy = %+v", mirror)
	}
	if c := conditions.Get(tc.Status.Conditions, conditions.CredentialsMirrored); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("CredentialsMirrored = %+v", c)
	}

	// A rotation is no new input: nothing re-applies, and the next Job gets the new values.
	hash := h.inputsHash(tc)
	var src corev1.Secret
	if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: id.Spec.SecretRef.Namespace, Name: "cloud"}, &src); err != nil {
		t.Fatal(err)
	}
	src.StringData = map[string]string{"AWS_ACCESS_KEY_ID": "AKIA2"}
	if err := h.c.Update(h.ctx, &src); err != nil {
		t.Fatal(err)
	}
	if h.inputsHash(tc) != hash {
		t.Fatal("a rotated credential changed the inputs hash")
	}
	h.writeState(jobs.KindCluster, "web", 1)
	h.finish(job, jobs.OutcomeSucceeded, nil)
	h.settle(tc)
	h.get(tc)
	tc.Spec.Variables.Raw = []byte(`{"region":"us"}`)
	if err := h.c.Update(h.ctx, tc); err != nil {
		t.Fatal(err)
	}
	h.settle(tc)
	if got := string(h.secret(mirrorName).Data["AWS_ACCESS_KEY_ID"]); got != "AKIA2" {
		t.Fatalf("the copy holds %q after the rotation, want the new value", got)
	}
	for _, e := range h.events() {
		if strings.Contains(e, "AKIA1") || strings.Contains(e, "AKIA2") {
			t.Fatalf("an event shows a credential: %s", e)
		}
	}

	// Revoked: the copy goes and nothing starts, not even a destroy.
	h.finish(h.runningJob(jobs.KindCluster, "web"), jobs.OutcomeSucceeded, nil)
	h.get(id)
	id.Spec.AllowedNamespaces = nil
	if err := h.c.Update(h.ctx, id); err != nil {
		t.Fatal(err)
	}
	h.settle(tc)
	h.wantIdentity(tc, metav1.ConditionFalse, conditions.ReasonNamespaceNotAllowed)
	if h.secret(mirrorName) != nil {
		t.Fatal("the copy outlived the revocation")
	}
	if err := h.c.Delete(h.ctx, tc); err != nil {
		t.Fatal(err)
	}
	h.settle(tc)
	for _, j := range h.jobs(jobs.KindCluster, "web") {
		if !jobs.OutcomeOf(&j).Finished() {
			t.Fatalf("%s started without credentials", j.Name)
		}
	}
}

func TestAnIdentityLendsNothingItDoesNotAllow(t *testing.T) {
	for _, tc := range []struct {
		rule    string
		allowed func(ns string) *infrav1.AllowedNamespaces
		data    map[string]string
		name    func(id string) string
		prepare func(h *harness, id string)
		status  metav1.ConditionStatus
		reason  string
	}{
		{"an identity that does not exist", nil, map[string]string{"k": "v"}, func(string) string { return "nobody" }, nil,
			metav1.ConditionFalse, conditions.ReasonIdentityNotFound},
		{"unset allowed namespaces allow none", func(string) *infrav1.AllowedNamespaces { return nil }, map[string]string{"k": "v"}, nil, nil,
			metav1.ConditionFalse, conditions.ReasonNamespaceNotAllowed},
		{"a list without the namespace", func(string) *infrav1.AllowedNamespaces { return &infrav1.AllowedNamespaces{List: []string{"other"}} },
			map[string]string{"k": "v"}, nil, nil, metav1.ConditionFalse, conditions.ReasonNamespaceNotAllowed},
		{"a selector the namespace's labels do not match", func(string) *infrav1.AllowedNamespaces {
			return &infrav1.AllowedNamespaces{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "blue"}}}
		}, map[string]string{"k": "v"}, nil, nil, metav1.ConditionFalse, conditions.ReasonNamespaceNotAllowed},
		{"an empty selector allows every namespace", func(string) *infrav1.AllowedNamespaces {
			return &infrav1.AllowedNamespaces{Selector: &metav1.LabelSelector{}}
		}, map[string]string{"k": "v"}, nil, nil, metav1.ConditionTrue, conditions.ReasonIdentityAllowed},
		{"an identity whose Secret does not exist", func(ns string) *infrav1.AllowedNamespaces { return &infrav1.AllowedNamespaces{List: []string{ns}} },
			nil, nil, nil, metav1.ConditionFalse, conditions.ReasonSecretNotFound},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			h := newHarness(t, jobs.KindCluster)
			var allowed *infrav1.AllowedNamespaces
			if tc.allowed != nil {
				allowed = tc.allowed(h.ns)
			}
			id := h.identity(allowed, tc.data)
			name := id.Name
			if tc.name != nil {
				name = tc.name(id.Name)
			}
			obj := h.cluster("web", withIdentity(name))
			h.settle(obj)
			h.wantIdentity(obj, tc.status, tc.reason)
			started := len(h.jobs(jobs.KindCluster, "web")) > 0
			if started != (tc.status == metav1.ConditionTrue) {
				t.Fatalf("Job started = %v with IdentityAllowed %s", started, tc.status)
			}
		})
	}
}

func TestASecretInTheWayOfTheCopyIsNotTouched(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	id := h.identity(&infrav1.AllowedNamespaces{List: []string{h.ns}}, map[string]string{"k": "v"})
	foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: workspace.MirrorName(id.Name), Namespace: h.ns}, StringData: map[string]string{"k": "mine"}}
	if err := h.c.Create(h.ctx, foreign); err != nil {
		t.Fatal(err)
	}
	tc := h.cluster("web", withIdentity(id.Name))
	h.settle(tc)
	h.get(tc)
	if c := conditions.Get(tc.Status.Conditions, conditions.CredentialsMirrored); c == nil || c.Reason != conditions.ReasonMirrorFailed {
		t.Fatalf("CredentialsMirrored = %+v", c)
	}
	if len(h.jobs(jobs.KindCluster, "web")) != 0 || h.runLease(jobs.KindCluster, "web") != nil {
		t.Fatal("a Job or its Lease without the credentials")
	}
	if got := string(h.secret(foreign.Name).Data["k"]); got != "mine" {
		t.Fatalf("the foreign Secret was overwritten: %q", got)
	}
}

// A machine takes its cluster's identity until it is provisioned, and keeps that one after: its
// recorded inputs were applied with it.
func TestAProvisionedMachineKeepsTheIdentityItWasProvisionedWith(t *testing.T) {
	h := newHarness(t, jobs.KindMachine)
	first := h.identity(&infrav1.AllowedNamespaces{List: []string{h.ns}}, map[string]string{"k": "v"})
	tc := &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: h.ns,
		Annotations: map[string]string{"cluster.x-k8s.io/managed-by": "elsewhere"}}}
	tc.Spec.Source.Image = image
	tc.Spec.IdentityRef = &infrav1.IdentityReference{Name: first.Name}
	if err := h.c.Create(h.ctx, tc); err != nil {
		t.Fatal(err)
	}
	m := machine(h, "m1")
	h.create(m)
	h.settle(m)
	h.wantIdentity(m, metav1.ConditionTrue, conditions.ReasonIdentityAllowed)
	h.writeState(jobs.KindMachine, "m1", 1)
	h.finish(h.runningJob(jobs.KindMachine, "m1"), jobs.OutcomeSucceeded, nil)
	h.settle(m)
	h.get(m)
	if !m.Status.IsProvisioned() {
		t.Fatalf("the machine is not provisioned: %+v", m.Status.Conditions)
	}

	h.get(tc)
	tc.Spec.IdentityRef = &infrav1.IdentityReference{Name: "another"}
	if err := h.c.Update(h.ctx, tc); err != nil {
		t.Fatal(err)
	}
	h.settle(m)
	h.wantIdentity(m, metav1.ConditionTrue, conditions.ReasonIdentityAllowed)
	if c := conditions.Get(m.Status.Conditions, conditions.IdentityAllowed); !strings.Contains(c.Message, first.Name) {
		t.Fatalf("IdentityAllowed = %+v, want the identity the machine was provisioned with", c)
	}
}

// An identity lends only a Secret of the controller's namespace: whoever may write a
// cluster-scoped identity must not carry a Secret of any other namespace into the namespaces it
// allows. The Secret elsewhere is never copied, and a copy made before goes.
func TestAnIdentityLendsOnlyASecretOfTheControllersNamespace(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	id := h.identity(&infrav1.AllowedNamespaces{List: []string{h.ns}}, map[string]string{"TOKEN": "controllers"})
	home := id.Spec.SecretRef.Namespace
	elsewhere := h.ns + "-elsewhere"
	if err := h.c.Create(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: elsewhere}}); err != nil {
		t.Fatal(err)
	}
	if err := h.c.Create(h.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cloud", Namespace: elsewhere}, StringData: map[string]string{"TOKEN": "elsewhere"}}); err != nil {
		t.Fatal(err)
	}
	pointAt := func(namespace string) {
		t.Helper()
		h.get(id)
		id.Spec.SecretRef.Namespace = namespace
		if err := h.c.Update(h.ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	mirrorName := workspace.MirrorName(id.Name)
	wantRefused := func(rule string, tc *infrav1.TerraformCluster) {
		t.Helper()
		h.settle(tc)
		h.wantIdentity(tc, metav1.ConditionFalse, conditions.ReasonSecretNotInControllerNamespace)
		if c := conditions.Get(tc.Status.Conditions, conditions.IdentityAllowed); !strings.Contains(c.Message, elsewhere) || !strings.Contains(c.Message, home) {
			t.Errorf("%s: IdentityAllowed message %q names neither the Secret's namespace nor the controller's", rule, c.Message)
		}
		if h.secret(mirrorName) != nil {
			t.Fatalf("%s: the Secret of another namespace was copied", rule)
		}
		for _, j := range h.jobs(jobs.KindCluster, tc.Name) {
			if !jobs.OutcomeOf(&j).Finished() {
				t.Fatalf("%s: %s runs", rule, j.Name)
			}
		}
	}

	pointAt(elsewhere)
	tc := h.cluster("web", withIdentity(id.Name))
	wantRefused("a Secret in another namespace is not lent", tc)

	pointAt(home)
	h.settle(tc)
	h.wantIdentity(tc, metav1.ConditionTrue, conditions.ReasonIdentityAllowed)
	if got := string(h.secret(mirrorName).Data["TOKEN"]); got != "controllers" {
		t.Fatalf("the copy holds %q, want the Secret of the controller's namespace", got)
	}

	h.writeState(jobs.KindCluster, "web", 1)
	h.finish(h.runningJob(jobs.KindCluster, "web"), jobs.OutcomeSucceeded, nil)
	pointAt(elsewhere)
	wantRefused("pointed at another namespace again, the copy goes", tc)
}

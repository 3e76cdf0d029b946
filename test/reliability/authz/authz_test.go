// Package authz checks with SubjectAccessReviews against the real kube-apiserver, under the RBAC
// of artifacts/, that each identity can do what it needs and nothing on a list of things it must
// not: a view-only user, a plan approver, an editor, an admin, an operator, a state unlocker, and the
// ServiceAccounts of the aggregated API server and of the controller.
package authz

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/test/reliability/rel"
	"github.com/captf/captf/test/testenv"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{}))
}

const ns = "team"

type who struct {
	user   string
	groups []string
}

func serviceAccount(namespace, name string) who {
	return who{user: "system:serviceaccount:" + namespace + ":" + name, groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}}
}

func person(name string) who { return who{user: name, groups: []string{"system:authenticated"}} }

type check struct {
	who         who
	verb        string
	group       string
	resource    string
	subresource string
	namespace   string
	name        string
	allowed     bool
}

func (c check) String() string {
	s := fmt.Sprintf("%s %s %s", c.who.user, c.verb, c.resource)
	if c.group != "" {
		s += "." + c.group
	}
	if c.subresource != "" {
		s += "/" + c.subresource
	}
	if c.name != "" {
		s += " " + c.name
	}
	if c.namespace != "" {
		s += " in " + c.namespace
	} else {
		s += " cluster-wide"
	}
	return s
}

func allowed(ctx context.Context, kube kubernetes.Interface, c check) (bool, error) {
	sar, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: c.who.user, Groups: c.who.groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: c.namespace, Verb: c.verb, Group: c.group, Resource: c.resource, Subresource: c.subresource, Name: c.name},
	}}, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return sar.Status.Allowed, nil
}

func TestLeastPrivilege(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	start := time.Now()
	if err := env.ApplyManifests(ctx,
		filepath.Join(env.RepoRoot, "artifacts/controller/namespace.yaml"),
		filepath.Join(env.RepoRoot, "artifacts/apiserver/serviceaccount.yaml"),
		filepath.Join(env.RepoRoot, "artifacts/apiserver/rbac.yaml"),
		filepath.Join(env.RepoRoot, "artifacts/apiserver/user-roles.yaml"),
		filepath.Join(env.RepoRoot, "artifacts/controller/rbac.yaml"),
	); err != nil {
		t.Fatal(err)
	}
	stop, err := env.StartClusterRoleAggregation(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	kube := kubernetes.NewForConfigOrDie(env.Config)
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for user, role := range map[string]string{"viewer": "view", "approver": "captf-plan-approver", "editor": "edit", "admin": "admin", "operator": "captf-operator", "unlocker": "captf-state-unlocker"} {
		_, err := kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The aggregation controller folds captf's roles into view, edit and admin.
	for _, c := range []check{
		{who: person("viewer"), verb: "get", group: "runs.captf.io", resource: "runs", namespace: ns, allowed: true},
		{who: person("editor"), verb: "list", group: "runs.captf.io", resource: "plans", namespace: ns, allowed: true},
		{who: person("editor"), verb: "patch", group: "infrastructure.cluster.x-k8s.io", resource: "terraformclusters", namespace: ns, allowed: true},
		{who: person("admin"), verb: "list", group: "runs.captf.io", resource: "plans", namespace: ns, allowed: true},
		{who: person("admin"), verb: "patch", group: "infrastructure.cluster.x-k8s.io", resource: "terraformclusters", namespace: ns, allowed: true},
	} {
		if err := rel.Poll(60*time.Second, func() (bool, error) { return allowed(ctx, kube, c) }); err != nil {
			t.Fatalf("%s: never allowed: %v", c, err)
		}
	}

	viewer, approver, editor, admin := person("viewer"), person("approver"), person("editor"), person("admin")
	operator, unlocker := person("operator"), person("unlocker")
	apiserver, ctrl := serviceAccount("captf-system", "captf-apiserver"), serviceAccount("captf-system", "captf-controller")
	const infra, runs, coordination = "infrastructure.cluster.x-k8s.io", "runs.captf.io", "coordination.k8s.io"
	// The Leases of a TerraformCluster web: its state lock (which unlock releases) and its run
	// Lease; and one that is not captf's.
	suffix := jobs.StateSecretSuffix(ns, jobs.KindCluster, "web")
	lockLease, runLease, otherLease := state.LockLeaseName(suffix), jobs.RunLeaseName(suffix), "leader-election-of-another-app"
	checks := []check{
		// A view-only user reads runs, and neither reads nor approves plans.
		{viewer, "get", runs, "runs", "", ns, "", true},
		{viewer, "watch", runs, "runs", "", ns, "", true},
		{viewer, "get", runs, "plans", "", ns, "", false},
		{viewer, "list", runs, "plans", "", ns, "", false},
		{viewer, "create", runs, "plans", "approval", ns, "", false},
		{viewer, "patch", infra, "terraformclusters", "", ns, "", false},
		{viewer, "get", "", "secrets", "", ns, "", false},
		// An approver reads and approves plans and cannot change the object.
		{approver, "get", runs, "plans", "", ns, "", true},
		{approver, "create", runs, "plans", "approval", ns, "", true},
		{approver, "patch", infra, "terraformclusters", "", ns, "", false},
		{approver, "update", infra, "terraformclusters", "", ns, "", false},
		{approver, "patch", infra, "terraformclusters", "status", ns, "", false},
		{approver, "get", "", "secrets", "", ns, "", false},
		{approver, "create", runs, "plans", "approval", "other", "", false},
		{viewer, "update", coordination, "leases", "", ns, "", false},
		// An editor reads plans and has the operator's rights, but approves nothing: whoever may
		// change a spec does not approve the plan of that change. Kubernetes' own edit role
		// writes Leases.
		{editor, "list", runs, "plans", "", ns, "", true},
		{editor, "create", runs, "plans", "approval", ns, "", false},
		{editor, "patch", infra, "terraformmachines", "", ns, "", true},
		{editor, "update", coordination, "leases", "", ns, "", true},
		// Neither does an admin of the namespace approve without captf-plan-approver.
		{admin, "list", runs, "plans", "", ns, "", true},
		{admin, "create", runs, "plans", "approval", ns, "", false},
		// An operator (kubectl captf suspend, resume, reconcile, replan) annotates the objects and
		// nothing more: no Lease of the namespace, captf's or another's, is its to write.
		{operator, "get", infra, "terraformclusters", "", ns, "", true},
		{operator, "list", infra, "terraformmachines", "", ns, "", true},
		{operator, "patch", infra, "terraformclusters", "", ns, "", true},
		{operator, "patch", infra, "terraformmachines", "", ns, "", true},
		{operator, "patch", infra, "terraformmachinepools", "", ns, "", true},
		{operator, "list", runs, "runs", "", ns, "", true},
		{operator, "update", coordination, "leases", "", ns, lockLease, false},
		{operator, "update", coordination, "leases", "", ns, runLease, false},
		{operator, "update", coordination, "leases", "", ns, otherLease, false},
		{operator, "patch", coordination, "leases", "", ns, otherLease, false},
		{operator, "get", coordination, "leases", "", ns, "", false},
		{operator, "get", "", "pods", "", ns, "", false},
		{operator, "update", infra, "terraformclusters", "", ns, "", false},
		{operator, "delete", infra, "terraformclusters", "", ns, "", false},
		{operator, "create", infra, "terraformclusters", "", ns, "", false},
		{operator, "patch", infra, "terraformclusters", "status", ns, "", false},
		{operator, "patch", infra, "terraformclusteridentities", "", "", "", false},
		{operator, "create", coordination, "leases", "", ns, "", false},
		{operator, "delete", coordination, "leases", "", ns, "", false},
		{operator, "get", "", "secrets", "", ns, "", false},
		{operator, "delete", "", "pods", "", ns, "", false},
		{operator, "create", "", "pods", "exec", ns, "", false},
		{operator, "get", runs, "plans", "", ns, "", false},
		{operator, "create", runs, "plans", "approval", ns, "", false},
		{operator, "patch", infra, "terraformclusters", "", "other", "", false},
		// A state unlocker (kubectl captf unlock), bound by an administrator and aggregated
		// nowhere: reads the object and the holder's pod and releases the lock by an update.
		{unlocker, "get", infra, "terraformclusters", "", ns, "", true},
		{unlocker, "get", infra, "terraformmachinepools", "", ns, "", true},
		{unlocker, "get", coordination, "leases", "", ns, lockLease, true},
		{unlocker, "update", coordination, "leases", "", ns, lockLease, true},
		{unlocker, "get", "", "pods", "", ns, "", true},
		{unlocker, "patch", infra, "terraformclusters", "", ns, "", false},
		{unlocker, "create", coordination, "leases", "", ns, "", false},
		{unlocker, "delete", coordination, "leases", "", ns, lockLease, false},
		{unlocker, "list", coordination, "leases", "", ns, "", false},
		{unlocker, "update", coordination, "leases", "", "other", lockLease, false},
		{unlocker, "get", "", "secrets", "", ns, "", false},
		{unlocker, "create", runs, "plans", "approval", ns, "", false},
		// The aggregated API server: reads Jobs and the kinds, patches approvals, delegates auth.
		{apiserver, "list", "batch", "jobs", "", "", "", true},
		{apiserver, "watch", "batch", "jobs", "", "", "", true},
		{apiserver, "get", infra, "terraformclusters", "", ns, "", true},
		{apiserver, "patch", infra, "terraformclusters", "", ns, "", true},
		{apiserver, "patch", infra, "terraformmachinepools", "", ns, "", true},
		{apiserver, "create", "authentication.k8s.io", "tokenreviews", "", "", "", true},
		{apiserver, "create", "authorization.k8s.io", "subjectaccessreviews", "", "", "", true},
		{apiserver, "get", "", "configmaps", "", "kube-system", "extension-apiserver-authentication", true},
		{apiserver, "get", "", "secrets", "", ns, "", false},
		{apiserver, "list", "", "secrets", "", "", "", false},
		// The controller's run key, by name in the install's namespace: get only, no other Secret.
		{apiserver, "get", "", "secrets", "", "captf-system", "captf-run-key", true},
		{apiserver, "get", "", "secrets", "", "captf-system", "captf-webhook-server-cert", false},
		{apiserver, "list", "", "secrets", "", "captf-system", "", false},
		{apiserver, "watch", "", "secrets", "", "captf-system", "", false},
		{apiserver, "update", "", "secrets", "", "captf-system", "captf-run-key", false},
		{apiserver, "get", "", "secrets", "", ns, "captf-run-key", false},
		{apiserver, "create", "batch", "jobs", "", ns, "", false},
		{apiserver, "delete", "batch", "jobs", "", ns, "", false},
		{apiserver, "patch", "batch", "jobs", "", ns, "", false},
		{apiserver, "patch", infra, "terraformmachines", "", ns, "", false},
		{apiserver, "update", infra, "terraformclusters", "status", ns, "", false},
		{apiserver, "delete", infra, "terraformclusters", "", ns, "", false},
		{apiserver, "get", "", "pods", "", ns, "", false},
		{apiserver, "create", "", "pods", "exec", ns, "", false},
		{apiserver, "escalate", "rbac.authorization.k8s.io", "clusterroles", "", "", "", false},
		{apiserver, "get", "", "configmaps", "", "kube-system", "", false},
		// The controller: runs Jobs with their Secrets, Leases, events and runner identity.
		{ctrl, "create", "batch", "jobs", "", ns, "", true},
		{ctrl, "delete", "batch", "jobs", "", ns, "", true},
		{ctrl, "get", "", "secrets", "", ns, "", true},
		{ctrl, "create", "", "secrets", "", ns, "", true},
		{ctrl, "delete", "", "secrets", "", ns, "", true},
		// Its metadata caches of managed Secrets, Leases and runner identities.
		{ctrl, "watch", "", "secrets", "", "", "", true},
		{ctrl, "watch", "coordination.k8s.io", "leases", "", "", "", true},
		{ctrl, "watch", "", "serviceaccounts", "", "", "", true},
		{ctrl, "watch", "rbac.authorization.k8s.io", "rolebindings", "", "", "", true},
		{ctrl, "watch", "rbac.authorization.k8s.io", "roles", "", "", "", true},
		{ctrl, "patch", infra, "terraformclusters", "status", ns, "", true},
		{ctrl, "update", infra, "terraformmachines", "finalizers", ns, "", true},
		{ctrl, "create", "coordination.k8s.io", "leases", "", ns, "", true},
		{ctrl, "create", "events.k8s.io", "events", "", ns, "", true},
		{ctrl, "create", "", "serviceaccounts", "", ns, "", true},
		{ctrl, "create", "rbac.authorization.k8s.io", "rolebindings", "", ns, "", true},
		{ctrl, "create", "rbac.authorization.k8s.io", "roles", "", ns, "", true},
		{ctrl, "get", "cluster.x-k8s.io", "clusters", "", ns, "", true},
		{ctrl, "delete", "", "namespaces", "", "", "", false},
		{ctrl, "create", "", "namespaces", "", "", "", false},
		{ctrl, "escalate", "rbac.authorization.k8s.io", "clusterroles", "", "", "", false},
		{ctrl, "bind", "rbac.authorization.k8s.io", "clusterroles", "", "", "cluster-admin", false},
		{ctrl, "bind", "rbac.authorization.k8s.io", "clusterroles", "", "", "edit", false},
		{ctrl, "create", "rbac.authorization.k8s.io", "clusterrolebindings", "", "", "", false},
		{ctrl, "update", "rbac.authorization.k8s.io", "roles", "", ns, "", false},
		{ctrl, "bind", "rbac.authorization.k8s.io", "clusterroles", "", "", "captf-runner", false},
		{ctrl, "delete", "rbac.authorization.k8s.io", "rolebindings", "", ns, "", false},
		{ctrl, "create", "", "pods", "", ns, "", false},
		{ctrl, "create", "", "pods", "exec", ns, "", false},
		{ctrl, "delete", "", "pods", "", ns, "", false},
		{ctrl, "create", "", "serviceaccounts", "token", ns, "captf-runner", false},
		{ctrl, "delete", infra, "terraformclusters", "", ns, "", false},
		{ctrl, "create", infra, "terraformclusters", "", ns, "", false},
		{ctrl, "patch", "cluster.x-k8s.io", "clusters", "", ns, "", false},
		{ctrl, "create", runs, "plans", "approval", ns, "", false},
		{ctrl, "delete", "apiextensions.k8s.io", "customresourcedefinitions", "", "", "", false},
		{ctrl, "update", "", "nodes", "", "", "", false},
		// Whether the approval policy is in force: its policy and binding by name, nothing else.
		{ctrl, "get", "admissionregistration.k8s.io", "validatingadmissionpolicybindings", "", "", "captf-approval-annotations", true},
		{ctrl, "get", "admissionregistration.k8s.io", "validatingadmissionpolicies", "", "", "captf-approval-annotations", true},
		{ctrl, "get", "admissionregistration.k8s.io", "validatingadmissionpolicybindings", "", "", "other", false},
		{ctrl, "list", "admissionregistration.k8s.io", "validatingadmissionpolicybindings", "", "", "", false},
		{ctrl, "update", "admissionregistration.k8s.io", "validatingadmissionpolicybindings", "", "", "captf-approval-annotations", false},
		{ctrl, "delete", "admissionregistration.k8s.io", "validatingadmissionpolicybindings", "", "", "captf-approval-annotations", false},
		{apiserver, "delete", "admissionregistration.k8s.io", "validatingadmissionpolicybindings", "", "", "captf-approval-annotations", false},
		{editor, "delete", "admissionregistration.k8s.io", "validatingadmissionpolicybindings", "", "", "captf-approval-annotations", false},
		{editor, "impersonate", "", "serviceaccounts", "", "captf-system", "captf-apiserver", false},
		// spec.variablesFrom reads a labelled ConfigMap by name: get, never list or watch.
		{ctrl, "get", "", "configmaps", "", ns, "", true},
		{ctrl, "list", "", "configmaps", "", ns, "", false},
		{ctrl, "watch", "", "configmaps", "", "", "", false},
		{ctrl, "update", "", "configmaps", "", ns, "", false},
		// Owner lookup reads Cluster API's objects; identities and their allowed namespaces.
		{ctrl, "watch", "cluster.x-k8s.io", "machines", "", "", "", true},
		{ctrl, "get", "cluster.x-k8s.io", "machinepools", "", ns, "", true},
		// Remediation annotates a Machine (spec.remediation.annotateMachine), and writes
		// nothing else of Cluster API's.
		{ctrl, "patch", "cluster.x-k8s.io", "machines", "", ns, "", true},
		{ctrl, "update", "cluster.x-k8s.io", "machines", "", ns, "", false},
		{ctrl, "delete", "cluster.x-k8s.io", "machines", "", ns, "", false},
		{ctrl, "patch", "cluster.x-k8s.io", "clusters", "", ns, "", false},
		{ctrl, "patch", "cluster.x-k8s.io", "machinepools", "", ns, "", false},
		{ctrl, "watch", infra, "terraformclusteridentities", "", "", "", true},
		{ctrl, "patch", infra, "terraformclusteridentities", "status", "", "", true},
		{ctrl, "update", infra, "terraformclusteridentities", "", "", "", false},
		{ctrl, "get", "", "namespaces", "", "", ns, true},
		{ctrl, "list", "", "namespaces", "", "", "", false},
	}
	denied, granted := 0, 0
	for _, c := range checks {
		got, err := allowed(ctx, kube, c)
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		if got != c.allowed {
			t.Errorf("%s: allowed=%v, want %v", c, got, c.allowed)
		}
		if c.allowed {
			granted++
		} else {
			denied++
		}
	}
	t.Logf("FIGURE authz: %d SubjectAccessReviews (%d needed rights granted, %d forbidden rights denied), %s", len(checks), granted, denied, time.Since(start).Round(time.Millisecond))
}

package app

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"sigs.k8s.io/yaml"

	runsv1alpha1 "github.com/captf/captf/apis/runs/v1alpha1"
)

func TestActionable(t *testing.T) {
	runs := schema.GroupResource{Group: runsv1alpha1.GroupName, Resource: "runs"}
	plans := schema.GroupResource{Group: runsv1alpha1.GroupName, Resource: "plans"}
	command := func(role string) *cobra.Command {
		return &cobra.Command{Use: "x", Annotations: map[string]string{RoleAnnotation: role}}
	}
	for _, tc := range []struct {
		name string
		cmd  *cobra.Command
		err  error
		// want are lines the advice has; none means err comes back as it is.
		want []string
	}{
		{
			name: "a 403 on runs names the command's role and the binding to create",
			cmd:  command(RoleRunsView),
			err:  apierrors.NewForbidden(runs, "", errors.New(`User "bob" cannot list resource "runs" in API group "runs.captf.io" in the namespace "dev"`)),
			want: []string{
				"You need list on runs (runs.captf.io) in namespace dev: ClusterRole captf-runs-view grants it.",
				"  kubectl create rolebinding captf-runs-view-bob --clusterrole=captf-runs-view --user=bob --namespace=dev",
			},
		},
		{
			name: "kubectl get's aggregate of one 403 gets the advice",
			cmd:  command(RoleRunsView),
			err:  utilerrors.NewAggregate([]error{apierrors.NewForbidden(runs, "", errors.New(`User "bob" cannot list resource "runs" in API group "runs.captf.io" in the namespace "dev"`))}),
			want: []string{"  kubectl create rolebinding captf-runs-view-bob --clusterrole=captf-runs-view --user=bob --namespace=dev"},
		},
		{
			name: "a 403 on plans/approval names the approver role",
			cmd:  command(RolePlanApprover),
			err:  apierrors.NewForbidden(schema.GroupResource{Group: runsv1alpha1.GroupName, Resource: "plans/approval"}, "p", errors.New(`User "alice@example.com" cannot create resource "plans/approval" in API group "runs.captf.io" in the namespace "dev"`)),
			want: []string{"  kubectl create rolebinding captf-plan-approver-alice-example.com --clusterrole=captf-plan-approver --user=alice@example.com --namespace=dev"},
		},
		{
			name: "a ServiceAccount is bound as one",
			cmd:  command(RoleRunsView),
			err:  apierrors.NewForbidden(runs, "", errors.New(`User "system:serviceaccount:ci:deployer" cannot watch resource "runs" in API group "runs.captf.io" in the namespace "dev"`)),
			want: []string{"--clusterrole=captf-runs-view --serviceaccount=ci:deployer --namespace=dev"},
		},
		{
			name: "a 403 across all namespaces is a ClusterRoleBinding",
			cmd:  command(RoleRunsView),
			err:  apierrors.NewForbidden(runs, "", errors.New(`User "bob" cannot list resource "runs" in API group "runs.captf.io" at the cluster scope`)),
			want: []string{"You need list on runs (runs.captf.io) at the cluster scope", "  kubectl create clusterrolebinding captf-runs-view-bob --clusterrole=captf-runs-view --user=bob"},
		},
		{
			name: "a 403 the role does not cover asks for the right itself",
			cmd:  command(RoleRunsView),
			err:  apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "s", errors.New(`User "bob" cannot get resource "secrets" in API group "" in the namespace "dev"`)),
			want: []string{"You need get on secrets in namespace dev. Ask an administrator for a Role that grants it", "  kubectl auth can-i get secrets --namespace=dev"},
		},
		{
			name: "a role the plugin does not know the rules of is offered",
			cmd:  command(RoleOperator),
			err:  apierrors.NewForbidden(schema.GroupResource{Group: "infrastructure.cluster.x-k8s.io", Resource: "terraformclusters"}, "web", errors.New(`User "bob" cannot patch resource "terraformclusters" in API group "infrastructure.cluster.x-k8s.io" in the namespace "dev"`)),
			want: []string{"--clusterrole=captf-operator --user=bob --namespace=dev"},
		},
		{
			name: "an admission policy's 403 names no user and gets no advice",
			cmd:  command(RolePlanApprover),
			err:  apierrors.NewForbidden(schema.GroupResource{Group: "infrastructure.cluster.x-k8s.io", Resource: "terraformclusters"}, "web", errors.New(`ValidatingAdmissionPolicy 'captf-approvals' denied request`)),
		},
		{
			name: "the aggregator's 503 says how to check the APIService",
			cmd:  command(RoleRunsView),
			err:  apierrors.NewServiceUnavailable("the server is currently unable to handle the request (get runs.runs.captf.io)"),
			want: []string{"The runs API (APIService v1alpha1.runs.captf.io) does not answer.", "  kubectl get apiservice v1alpha1.runs.captf.io", "  kubectl -n captf-system get deployment captf-apiserver", "  kubectl -n captf-system logs deployment/captf-apiserver"},
		},
		{
			name: "a missing APIService is the same advice",
			cmd:  command(RoleRunsView),
			err:  errors.New(`the server doesn't have a resource type "runs.runs.captf.io"`),
			want: []string{"  kubectl get apiservice v1alpha1.runs.captf.io"},
		},
		{
			name: "a client without the kind is the same advice",
			cmd:  command(RolePlanApprover),
			err:  &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: runsv1alpha1.GroupName, Kind: "Plan"}, SearchedVersions: []string{"v1alpha1"}},
			want: []string{"  kubectl get apiservice v1alpha1.runs.captf.io"},
		},
		{
			name: "a 404 of a resource of another API gets no advice",
			cmd:  command(RoleRunsView),
			err:  apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "p"),
		},
		{
			name: "a plan that is not found gets no advice",
			cmd:  command(RolePlanApprover),
			err:  apierrors.NewNotFound(plans, "p"),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Actionable(tc.cmd, tc.err)
			if len(tc.want) == 0 {
				if got.Error() != tc.err.Error() {
					t.Fatalf("Actionable = %v, want the error as it is", got)
				}
				return
			}
			if !strings.HasPrefix(got.Error(), tc.err.Error()+"\n") {
				t.Errorf("the advice does not follow the error:\n%s", got)
			}
			for _, want := range tc.want {
				if !strings.Contains(got.Error(), want) {
					t.Errorf("advice lacks %q:\n%s", want, got)
				}
			}
		})
	}
}

// TestRoleGrantsAreTheInstalledRoles: the rights Actionable assumes a role grants are those of
// the install's ClusterRoles.
func TestRoleGrantsAreTheInstalledRoles(t *testing.T) {
	data, err := os.ReadFile("../../../artifacts/apiserver/user-roles.yaml")
	if err != nil {
		t.Fatal(err)
	}
	installed := map[string][]string{}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var role rbacv1.ClusterRole
		if err := yaml.UnmarshalStrict([]byte(doc), &role); err != nil {
			t.Fatal(err)
		}
		for _, rule := range role.Rules {
			if slices.Contains(rule.APIGroups, runsv1alpha1.GroupName) {
				installed[role.Name] = append(installed[role.Name], rule.Resources...)
			}
		}
	}
	for role, grants := range roleGrants {
		got := slices.Sorted(slices.Values(installed[role]))
		if !slices.Equal(got, slices.Sorted(slices.Values(grants))) {
			t.Errorf("ClusterRole %s grants %v in the install, the plugin assumes %v", role, got, grants)
		}
	}
}

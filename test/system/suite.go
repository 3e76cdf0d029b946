package system

import (
	"context"
	"fmt"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/test/capitest"
)

// Suite is one test's view of the system Main started: an admin client and a namespace of its
// own, with the steps the end-to-end and plugin tests share.
type Suite struct {
	T   testing.TB
	Ctx context.Context
	C   client.Client
	NS  string
	Sys *System
}

// NewSuite gives a test its own namespace, or skips it when the system is not running.
func NewSuite(t testing.TB, prefix string) *Suite {
	t.Helper()
	sys := Get(t)
	c, ns := sys.NewNamespace(t, prefix)
	return &Suite{T: t, Ctx: context.Background(), C: c, NS: ns, Sys: sys}
}

// Cluster creates a TerraformCluster on the sample module with drift checks off.
func (s *Suite) Cluster(name, variables string, mutate ...func(*infrav1.TerraformCluster)) *infrav1.TerraformCluster {
	s.T.Helper()
	tc := &infrav1.TerraformCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.NS},
		Spec: infrav1.TerraformClusterSpec{
			WorkspaceSpec: infrav1.WorkspaceSpec{
				Source:    infrav1.SourceSpec{Image: SampleNoopImage},
				Variables: &apiextensionsv1.JSON{Raw: []byte(variables)},
			},
			Drift: infrav1.DriftSpec{IntervalSeconds: ptr.To[int64](0)},
		},
	}
	for _, m := range mutate {
		m(tc)
	}
	s.Create(tc)
	return tc
}

// Create creates an object with the Cluster API owner Cluster API would give it (capitest.Own).
func (s *Suite) Create(obj client.Object) {
	s.T.Helper()
	if err := capitest.Own(s.Ctx, s.C, obj); err != nil {
		s.T.Fatal(err)
	}
	if err := s.C.Create(s.Ctx, obj); err != nil {
		s.T.Fatal(err)
	}
}

// PatchVariables merges variables (a JSON object) into an object's spec.variables.
func (s *Suite) PatchVariables(obj client.Object, variables string) {
	s.T.Helper()
	patch := fmt.Sprintf(`{"spec":{"variables":%s}}`, variables)
	if err := s.C.Patch(s.Ctx, obj, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
		s.T.Fatal(err)
	}
}

// Approver creates a user who may only read and approve plans in the suite's namespace
// (ClusterRole captf-plan-approver) and returns its kubeconfig.
func (s *Suite) Approver(name string) string {
	s.T.Helper()
	_, kubeconfig, err := s.Sys.Env.AddUser(name)
	if err != nil {
		s.T.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.NS},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "captf-plan-approver"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}},
	}
	if err := s.C.Create(s.Ctx, binding); err != nil {
		s.T.Fatal(err)
	}
	return kubeconfig
}

// Eventually polls cond until it holds, failing the test with the controller's log when
// timeout passes.
func (s *Suite) Eventually(what string, timeout time.Duration, cond func(ctx context.Context) (bool, error)) {
	s.T.Helper()
	if err := wait.PollUntilContextTimeout(s.Ctx, 250*time.Millisecond, timeout, true, cond); err != nil {
		s.T.Fatalf("%s: %v\ncontroller log:\n%s", what, err, s.Sys.Log("controller"))
	}
}

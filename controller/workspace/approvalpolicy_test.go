package workspace

import (
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/captf/captf/controller/decide"
	"github.com/captf/captf/jobs"
)

func TestTheApprovalPolicyIsInForceOnlyWhenBoundToDenyEverywhere(t *testing.T) {
	bound := func() *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
		return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: ApprovalPolicyName},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName: ApprovalPolicyName, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			},
		}
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: ApprovalPolicyName}}
	for _, tc := range []struct {
		rule    string
		binding func() *admissionregistrationv1.ValidatingAdmissionPolicyBinding
		policy  *admissionregistrationv1.ValidatingAdmissionPolicy
		want    string // a part of the problem; "" when the policy is in force
	}{
		{"the install's policy and binding are in force", bound, policy, ""},
		{"a binding whose matchResources selects everything is in force", func() *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
			b := bound()
			b.Spec.MatchResources = &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{}, ObjectSelector: &metav1.LabelSelector{}}
			return b
		}, policy, ""},
		{"without the binding it is not", func() *admissionregistrationv1.ValidatingAdmissionPolicyBinding { return nil }, policy, "ValidatingAdmissionPolicyBinding " + ApprovalPolicyName + " does not exist"},
		{"without the policy it is not", bound, nil, "ValidatingAdmissionPolicy " + ApprovalPolicyName + " does not exist"},
		{"a binding of another policy is not", func() *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
			b := bound()
			b.Spec.PolicyName = "other"
			return b
		}, policy, `binds the policy "other"`},
		{"a binding that only warns is not", func() *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
			b := bound()
			b.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn, admissionregistrationv1.Audit}
			return b
		}, policy, "does not deny"},
		{"a binding for some namespaces is not", func() *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
			b := bound()
			b.Spec.MatchResources = &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}}
			return b
		}, policy, "holds only for some objects"},
		{"a binding for some objects is not", func() *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
			b := bound()
			b.Spec.MatchResources = &admissionregistrationv1.MatchResources{ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "x", Operator: metav1.LabelSelectorOpExists}}}}
			return b
		}, policy, "holds only for some objects"},
		{"a binding that leaves out some resources is not", func() *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
			b := bound()
			b.Spec.MatchResources = &admissionregistrationv1.MatchResources{ExcludeResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{}}}
			return b
		}, policy, "holds only for some objects"},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			got := ApprovalPolicyProblem(tc.binding(), tc.policy)
			if (got == "") != (tc.want == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("ApprovalPolicyProblem = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestOnlyAnApplyOfAnApprovalActsOnOne(t *testing.T) {
	const plan = "p2:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	for _, tc := range []struct {
		rule string
		d    decide.Decision
		want string
	}{
		{"an apply of an approved plan", decide.Decision{Op: jobs.OpApply, ExpectPlan: plan}, jobs.AnnotationApprovePlan + "=" + plan},
		{"an apply of approved deletes", decide.Decision{Op: jobs.OpApply, AllowDeletesHash: "h1:ab"}, jobs.AnnotationApproveDestructivePlan + "=h1:ab"},
		{"an apply of the empty plan needs no approval", decide.Decision{Op: jobs.OpApply, ExpectPlan: jobs.EmptyPlanHash}, ""},
		{"a guarded apply", decide.Decision{Op: jobs.OpApply, Guard: true}, ""},
		{"a plan", decide.Decision{Op: jobs.OpPlan}, ""},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			if got := approvalOf(tc.d); got != tc.want {
				t.Fatalf("approvalOf = %q, want %q", got, tc.want)
			}
		})
	}
}

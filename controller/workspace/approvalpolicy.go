package workspace

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/decide"
	"github.com/captf/captf/jobs"
)

// ApprovalPolicyName names the ValidatingAdmissionPolicy of artifacts/policy, and its binding,
// that keep approval annotations to the runs API server.
const ApprovalPolicyName = "captf-approval-annotations"

// ApprovalPolicyTTL is how long the controller trusts what it last read of the approval policy.
const ApprovalPolicyTTL = 30 * time.Second

// ApprovalGuard tells whether approval annotations can only have come through plans/approval.
type ApprovalGuard interface {
	// Unguarded says why anyone who may edit an object could have written its approval
	// annotations, or "" while the admission policy keeps them to the runs API server.
	Unguarded(ctx context.Context) (string, error)
}

// PolicyGuard is the ApprovalGuard of an install: it reads the approval policy and its binding
// live, at most once per TTL, so an approval waits at most that long after they are installed
// and no pass trusts a binding deleted longer ago.
type PolicyGuard struct {
	Reader client.Reader
	Clock  clock.PassiveClock
	TTL    time.Duration

	mu   sync.Mutex
	read time.Time
	why  string
}

// Unguarded implements ApprovalGuard.
func (g *PolicyGuard) Unguarded(ctx context.Context) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.Clock.Now()
	if !g.read.IsZero() && now.Sub(g.read) < g.TTL {
		return g.why, nil
	}
	key := client.ObjectKey{Name: ApprovalPolicyName}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	if err := g.Reader.Get(ctx, key, binding); apierrors.IsNotFound(err) {
		binding = nil
	} else if err != nil {
		return "", fmt.Errorf("reading the ValidatingAdmissionPolicyBinding %s: %w", ApprovalPolicyName, err)
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	if err := g.Reader.Get(ctx, key, policy); apierrors.IsNotFound(err) {
		policy = nil
	} else if err != nil {
		return "", fmt.Errorf("reading the ValidatingAdmissionPolicy %s: %w", ApprovalPolicyName, err)
	}
	g.why, g.read = ApprovalPolicyProblem(binding, policy), now
	return g.why, nil
}

// ApprovalPolicyProblem says why the approval policy does not keep approval annotations to the
// runs API server, or "" when it does: its binding exists, binds it, denies, and holds for every
// object. A nil binding or policy does not exist. What the policy's expressions say is the
// install's (artifacts/policy); whoever may change them may change anything.
func ApprovalPolicyProblem(binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding, policy *admissionregistrationv1.ValidatingAdmissionPolicy) string {
	b := "the ValidatingAdmissionPolicyBinding " + ApprovalPolicyName
	switch {
	case binding == nil:
		return b + " does not exist"
	case binding.Spec.PolicyName != ApprovalPolicyName:
		return fmt.Sprintf("%s binds the policy %q, not %s", b, binding.Spec.PolicyName, ApprovalPolicyName)
	case !slices.Contains(binding.Spec.ValidationActions, admissionregistrationv1.Deny):
		return fmt.Sprintf("%s does not deny (validationActions %v)", b, binding.Spec.ValidationActions)
	case narrowed(binding.Spec.MatchResources):
		return b + " holds only for some objects (matchResources)"
	case policy == nil:
		return "the ValidatingAdmissionPolicy " + ApprovalPolicyName + " does not exist"
	}
	return ""
}

// narrowed reports whether a binding's matchResources leaves some objects out.
func narrowed(m *admissionregistrationv1.MatchResources) bool {
	if m == nil {
		return false
	}
	selects := func(s *metav1.LabelSelector) bool {
		return s != nil && (len(s.MatchLabels) > 0 || len(s.MatchExpressions) > 0)
	}
	return selects(m.NamespaceSelector) || selects(m.ObjectSelector) || len(m.ResourceRules) > 0 || len(m.ExcludeResourceRules) > 0
}

// approvalOf names the approval a decision acts on, "" when it acts on none: an apply of an
// approved plan (the empty plan needs none) or of inputs whose destructive plan was approved.
func approvalOf(d decide.Decision) string {
	switch {
	case d.AllowDeletesHash != "":
		return jobs.AnnotationApproveDestructivePlan + "=" + d.AllowDeletesHash
	case d.ExpectPlan != "" && d.ExpectPlan != jobs.EmptyPlanHash:
		return jobs.AnnotationApprovePlan + "=" + d.ExpectPlan
	}
	return ""
}

// approvalGuarded holds back an apply that acts on an approval while nothing keeps approval
// annotations to the runs API server: anyone who may edit the object could have written it,
// under any name, and the separation of duties of plans/approval would be gone unnoticed. wait
// is how long to wait when it is held back. Without a guard (--require-approval-policy=false)
// the apply starts, and an event says where its approval came from.
func (p *pass) approvalGuarded(ctx context.Context, d decide.Decision) (wait time.Duration, err error) {
	approval := approvalOf(d)
	if approval == "" {
		return 0, nil
	}
	if p.r.Approvals == nil {
		p.event(nil, corev1.EventTypeWarning, EventApprovalUnguarded,
			"Acting on the approval %s as the object's annotations hold it: the controller runs with --require-approval-policy=false, so anyone who may edit the object could have written it", approval)
		return 0, nil
	}
	why, err := p.r.Approvals.Unguarded(ctx)
	if err != nil || why == "" {
		return 0, err
	}
	msg := fmt.Sprintf("the approval %s is not acted on: %s, so anyone who may edit this object could have written it; "+
		"install the approval policy (artifacts/policy, part of every install) and approve through plans/approval (kubectl captf approve)", approval, why)
	logf.FromContext(ctx).Info("an approval waits for the approval policy", "approval", approval, "why", why)
	setOpCondition(p.status(), p.stamp(), d.Op, metav1.ConditionFalse, conditions.ReasonApprovalUnguarded, msg)
	p.event(nil, corev1.EventTypeWarning, EventApprovalUnguarded, "%s", msg)
	return GateRequeue, nil
}

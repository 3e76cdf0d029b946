package app

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	runsv1alpha1 "github.com/captf/captf/apis/runs/v1alpha1"
)

// The install's names for the runs API (artifacts/apiserver), which an unavailable API's
// advice points at.
const (
	apiServiceName      = "v1alpha1." + runsv1alpha1.GroupName
	apiServerNamespace  = "captf-system"
	apiServerDeployment = "captf-apiserver"
)

// roleGrants are the resources of runs.captf.io each ClusterRole of
// artifacts/apiserver/user-roles.yaml grants (a test compares them). A 403 on anything else is
// not fixed by binding the role, so the advice does not offer it.
var roleGrants = map[string][]string{
	RoleRunsView:     {"runs"},
	RolePlanApprover: {"plans", "plans/approval"},
}

// forbidden is the API server's 403 for an RBAC denial, e.g. `User "bob" cannot list resource
// "runs" in API group "runs.captf.io" in the namespace "dev"`.
var forbidden = regexp.MustCompile(`User "([^"]*)" cannot (\S+) resource "([^"]+)" in API group "([^"]*)"(?: in the namespace "([^"]*)")?`)

// Actionable returns err with what to do next, for the command that failed: a 403 names the
// ClusterRole to bind (the command's RoleAnnotation) and the command that binds it; an
// unavailable runs API says how to check the APIService and the server behind it. Other
// errors are returned as they are.
func Actionable(cmd *cobra.Command, err error) error {
	if err == nil {
		return nil
	}
	// kubectl get returns what it could not get as an Aggregate, which errors.As does not
	// look into.
	var agg utilerrors.Aggregate
	if errors.As(err, &agg) && len(agg.Errors()) == 1 {
		return Actionable(cmd, agg.Errors()[0])
	}
	if errors.As(err, &agg) && len(agg.Errors()) > 1 {
		errs := make([]error, 0, len(agg.Errors()))
		for _, e := range agg.Errors() {
			errs = append(errs, Actionable(cmd, e))
		}
		return utilerrors.NewAggregate(errs)
	}
	if advice := forbiddenAdvice(cmd, err); advice != "" {
		return &adviceError{err: err, advice: advice}
	}
	if runsAPIUnavailable(err) {
		return &adviceError{err: err, advice: fmt.Sprintf(
			"The runs API (APIService %s) does not answer. Check that it is Available, and the server behind it:\n"+
				"  kubectl get apiservice %[1]s\n"+
				"  kubectl -n %s get deployment %s\n"+
				"  kubectl -n %[2]s logs deployment/%[3]s",
			apiServiceName, apiServerNamespace, apiServerDeployment)}
	}
	return err
}

// adviceError is an error followed by what to do about it.
type adviceError struct {
	err    error
	advice string
}

func (e *adviceError) Error() string { return e.err.Error() + "\n" + e.advice }
func (e *adviceError) Unwrap() error { return e.err }

// forbiddenAdvice says which role to bind after an RBAC 403, or "" when err is none (an
// admission policy's 403 names no user and gets no advice).
func forbiddenAdvice(cmd *cobra.Command, err error) string {
	if !apierrors.IsForbidden(err) && !strings.Contains(err.Error(), "is forbidden: User ") {
		return ""
	}
	m := forbidden.FindStringSubmatch(err.Error())
	if m == nil {
		return ""
	}
	// The message is the server's: each part shown is Printable.
	user, verb, resource, group, ns := Printable(m[1]), Printable(m[2]), Printable(m[3]), Printable(m[4]), Printable(m[5])
	what := resource
	if group != "" {
		what += " (" + group + ")"
	}
	where := "at the cluster scope"
	if ns != "" {
		where = "in namespace " + ns
	}
	role := ""
	if cmd != nil {
		role = cmd.Annotations[RoleAnnotation]
	}
	grants, known := roleGrants[role]
	if role == "" || (known && (group != runsv1alpha1.GroupName || !slices.Contains(grants, resource))) {
		return fmt.Sprintf("You need %s on %s %s. Ask an administrator for a Role that grants it; check with:\n  kubectl auth can-i %s %s%s",
			verb, what, where, verb, qualified(resource, group), nsFlag(ns))
	}
	return fmt.Sprintf("You need %s on %s %s: ClusterRole %s grants it. Ask an administrator to bind it to you:\n  %s",
		verb, what, where, role, bindCommand(role, user, ns))
}

// bindCommand is the kubectl command that binds role to user in ns, or cluster-wide.
func bindCommand(role, user, ns string) string {
	subject := "--user=" + user
	if sa, ok := strings.CutPrefix(user, "system:serviceaccount:"); ok {
		subject = "--serviceaccount=" + sa
	}
	name := bindingName(role + "-" + user)
	if ns == "" {
		return fmt.Sprintf("kubectl create clusterrolebinding %s --clusterrole=%s %s", name, role, subject)
	}
	return fmt.Sprintf("kubectl create rolebinding %s --clusterrole=%s %s --namespace=%s", name, role, subject, ns)
}

// bindingName makes s a valid object name: lower case letters, digits, '-' and '.'.
func bindingName(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '.':
			b.WriteRune(r)
		default:
			b.WriteRune('-')
		}
	}
	return strings.Trim(b.String(), "-.")
}

func qualified(resource, group string) string {
	if group == "" {
		return resource
	}
	base, sub, hasSub := strings.Cut(resource, "/")
	if hasSub {
		return base + "." + group + " --subresource=" + sub
	}
	return resource + "." + group
}

func nsFlag(ns string) string {
	if ns == "" {
		return " --all-namespaces"
	}
	return " --namespace=" + ns
}

// runsAPIUnavailable is whether err says the aggregated runs API does not answer: the
// aggregator's 503, or a client that finds no runs.captf.io resources because discovery
// failed or the APIService is missing.
func runsAPIUnavailable(err error) bool {
	msg := err.Error()
	ours := strings.Contains(msg, runsv1alpha1.GroupName)
	switch {
	case apierrors.IsServiceUnavailable(err), discovery.IsGroupDiscoveryFailedError(err), meta.IsNoMatchError(err):
		return ours
	case strings.Contains(msg, "the server could not find the requested resource"),
		strings.Contains(msg, "the server is currently unable to handle the request"),
		strings.Contains(msg, "the server doesn't have a resource type"):
		return ours
	}
	return false
}

// notApproved is approvalError, and for a plan that is no longer its object's current one, the
// name of the plan that is, or what to do when none waits.
func notApproved(ctx context.Context, c client.Client, plan *runsv1alpha1.Plan, err error) error {
	refused := approvalError(plan.Name, err)
	if !apierrors.IsConflict(err) {
		return refused
	}
	var fresh runsv1alpha1.Plan
	if c.Get(ctx, client.ObjectKeyFromObject(plan), &fresh) != nil ||
		(fresh.Status.Phase != runsv1alpha1.PlanPhaseSuperseded && fresh.Status.Phase != runsv1alpha1.PlanPhaseChanged) {
		return refused
	}
	target := fresh.Spec.Target
	current, found, lookupErr := CurrentPlan(ctx, c, fresh.Namespace, target)
	switch {
	case lookupErr != nil:
		return refused
	case !found:
		return fmt.Errorf("%w\nNo plan of %s/%s awaits approval now; list them with `kubectl captf plans %[3]s`, and see what runs next with `kubectl captf why %[3]s`",
			refused, target.Kind, target.Name)
	}
	return fmt.Errorf("%w\nThe current plan of %s/%s is %s (%s): review it with `kubectl captf plan %[4]s`, then `kubectl captf approve %[4]s`",
		refused, target.Kind, target.Name, current.Name, current.Status.Phase)
}

// CurrentPlan returns the newest plan of target in ns that is planning, awaiting approval or
// approved: the one an approval of target may name.
func CurrentPlan(ctx context.Context, c client.Client, ns string, target runsv1alpha1.Target) (*runsv1alpha1.Plan, bool, error) {
	var plans runsv1alpha1.PlanList
	err := c.List(ctx, &plans, client.InNamespace(ns), client.MatchingFields{"spec.target.kind": target.Kind, "spec.target.name": target.Name})
	if err != nil {
		return nil, false, fmt.Errorf("listing the plans of %s/%s: %w", target.Kind, target.Name, err)
	}
	var current *runsv1alpha1.Plan
	for i := range plans.Items {
		p := &plans.Items[i]
		switch p.Status.Phase {
		case runsv1alpha1.PlanPhasePlanning, runsv1alpha1.PlanPhaseAwaitingApproval, runsv1alpha1.PlanPhaseApproved:
		default:
			continue
		}
		if current == nil || current.CreationTimestamp.Before(&p.CreationTimestamp) ||
			(current.CreationTimestamp.Equal(&p.CreationTimestamp) && current.Name < p.Name) {
			current = p
		}
	}
	return current, current != nil, nil
}

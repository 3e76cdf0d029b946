package app

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubectl/pkg/util/templates"
	"sigs.k8s.io/controller-runtime/pkg/client"

	runsv1alpha1 "github.com/captf/captf/apis/runs/v1alpha1"
)

func newPlanCommand(o *Options) *cobra.Command {
	return &cobra.Command{
		Use:     "plan PLAN",
		GroupID: GroupInspect,
		Short:   "Show a plan: its target, phase, hash, counts and planned resources",
		Long: "Show a plan: its target, source, phase, the hash an approval quotes, its counts and the\n" +
			"resources it creates, changes or destroys." + rights("get on plans (runs.captf.io), granted by the ClusterRole\n"+
			"captf-plan-approver, and by captf-plans-edit, which the edit and admin roles aggregate."),
		Example: templates.Examples(`
			# Show a plan of web: its hash, its counts and the resources it changes
			kubectl captf plan captf-c-web-plan-a1-76a829`),
		Annotations:       map[string]string{RoleAnnotation: RolePlanApprover},
		ValidArgsFunction: CompletePlans(o, ""),
		Args:              cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, plan, err := o.getPlan(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return PrintPlan(o.Out, plan)
		},
	}
}

func newApproveCommand(o *Options) *cobra.Command {
	var yes, dryRun bool
	var hash, allFor string
	cmd := &cobra.Command{
		Use:   "approve (PLAN | --all-for TARGET)",
		Short: "Approve a plan by the hash shown, after confirmation",
		Long: "Show the plan, ask for confirmation unless --yes, and POST a PlanApproval quoting the\n" +
			"plan's status.approvalHash (its plan hash, or the inputs hash of an apply blocked before a\n" +
			"destructive plan) to plans/PLAN/approval. The server refuses with 409 Conflict when the plan\n" +
			"is no longer the current one or the hash differs. --hash quotes a hash reviewed earlier.\n" +
			"--all-for TARGET approves the one plan of the objects named TARGET that waits for approval\n" +
			"(phase AwaitingApproval), and refuses when none or several wait." +
			rights("get on plans and create on plans/approval (runs.captf.io), granted by the\n"+
				"ClusterRole captf-plan-approver, which an administrator binds per namespace: no edit or\n"+
				"admin role approves, so that whoever changes a spec does not approve the plan of it."),
		GroupID: GroupOperate,
		Example: templates.Examples(`
			# Show the plan, then approve it after answering y
			kubectl captf approve captf-c-web-plan-a1-76a829

			# Approve without a question, quoting the hash reviewed earlier
			kubectl captf approve captf-c-web-plan-a1-76a829 --yes --hash=p3:6ed896a4bf11b2cbc8fc4dd10ba4b46df4ac2e6ebbeb523efa538bda4deae0a9

			# Approve the one plan of the objects named web that waits
			kubectl captf approve --all-for web`),
		Annotations:       map[string]string{RoleAnnotation: RolePlanApprover},
		ValidArgsFunction: CompletePlans(o, runsv1alpha1.PlanPhaseAwaitingApproval),
		Args:              cobra.RangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case allFor != "" && len(args) == 1:
				return fmt.Errorf("give either PLAN or --all-for TARGET, not both")
			case allFor != "":
				name, err := o.waitingPlanOf(cmd.Context(), allFor)
				if err != nil {
					return err
				}
				args = []string{name}
			case len(args) == 0:
				return fmt.Errorf("give the PLAN to approve, or --all-for TARGET (list the plans with `kubectl get plans`)")
			}
			return o.approve(cmd.Context(), args[0], hash, yes, dryRun)
		},
	}
	cmd.Flags().StringVar(&allFor, "all-for", "", "Approve the one plan of the objects named TARGET that waits for approval.")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "Approve without asking.")
	cmd.Flags().StringVar(&hash, "hash", "", "The hash to quote instead of the plan's status.approvalHash.")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "Let the server decide, but write nothing.")
	return cmd
}

// waitingPlanOf returns the name of the one plan of the objects named target that waits for
// approval; none or several is an error that lists the plans.
func (o *Options) waitingPlanOf(ctx context.Context, target string) (string, error) {
	ns, err := o.namespace()
	if err != nil {
		return "", err
	}
	c, err := o.client()
	if err != nil {
		return "", err
	}
	var plans runsv1alpha1.PlanList
	if err := c.List(ctx, &plans, client.InNamespace(ns), client.MatchingFields{"spec.target.name": target}); err != nil {
		return "", fmt.Errorf("listing the plans of %s in namespace %s: %w", target, ns, err)
	}
	var name string
	var waiting, others []string
	for _, p := range plans.Items {
		desc := Printable(fmt.Sprintf("%s (%s/%s, %s)", p.Name, p.Spec.Target.Kind, p.Spec.Target.Name, orNone(string(p.Status.Phase))))
		if p.Status.Phase == runsv1alpha1.PlanPhaseAwaitingApproval {
			name, waiting = p.Name, append(waiting, desc)
		} else {
			others = append(others, desc)
		}
	}
	switch {
	case len(waiting) == 1:
		return name, nil
	case len(waiting) > 1:
		return "", fmt.Errorf("%d plans of %q wait for approval: %s; approve one by name with `kubectl captf approve PLAN`", len(waiting), target, strings.Join(waiting, ", "))
	case len(others) > 0:
		return "", fmt.Errorf("no plan of %q waits for approval in namespace %s; its plans: %s", target, ns, strings.Join(others, ", "))
	}
	return "", fmt.Errorf("no plan of %q waits for approval in namespace %s: it has no plans (is it a TerraformCluster with spec.applyPolicy: Manual?)", target, ns)
}

// getPlan reads a plan in the namespace; a 404 becomes a clear error.
func (o *Options) getPlan(ctx context.Context, name string) (client.Client, *runsv1alpha1.Plan, error) {
	ns, err := o.namespace()
	if err != nil {
		return nil, nil, err
	}
	c, err := o.client()
	if err != nil {
		return nil, nil, err
	}
	var plan runsv1alpha1.Plan
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &plan); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("plan %q not found in namespace %s (list them with `kubectl get plans -n %s`)", name, ns, ns)
		}
		return nil, nil, fmt.Errorf("reading plan %s: %w", name, err)
	}
	return c, &plan, nil
}

// PrintPlan writes a plan's summary and its resources. Every text is the server's, and the
// resource addresses come from the module's run, so each is shown Printable.
func PrintPlan(w io.Writer, p *runsv1alpha1.Plan) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Plan:      %s\n", Printable(p.Name))
	fmt.Fprintf(&b, "Namespace: %s\n", Printable(p.Namespace))
	fmt.Fprintf(&b, "Target:    %s\n", planTarget(p))
	fmt.Fprintf(&b, "Source:    %s\n", Printable(string(p.Spec.Source)))
	fmt.Fprintf(&b, "Phase:     %s\n", Printable(orNone(string(p.Status.Phase))))
	fmt.Fprintf(&b, "Hash:      %s\n", Printable(orNone(p.Status.PlanHash)))
	if p.Status.ApprovalHash != p.Status.PlanHash {
		fmt.Fprintf(&b, "Approve:   %s (the inputs hash: approving a blocked apply approves its inputs, not an exact plan)\n", Printable(orNone(p.Status.ApprovalHash)))
	}
	fmt.Fprintf(&b, "Changes:   %d to add, %d to change, %d to destroy\n", p.Status.Add, p.Status.Change, p.Status.Destroy)
	if p.Status.Destructive {
		fmt.Fprintf(&b, "           destructive: it deletes or replaces resources\n")
	}
	if p.Status.ApprovedBy != "" {
		at := ""
		if p.Status.ApprovedAt != nil {
			at = " at " + p.Status.ApprovedAt.UTC().Format("2006-01-02T15:04:05Z")
		}
		fmt.Fprintf(&b, "Approved:  by %s%s\n", Printable(p.Status.ApprovedBy), at)
	}
	if p.Status.ResultUnreadable {
		fmt.Fprintf(&b, "The run's result summary is unreadable.\n")
	}
	if len(p.Status.Resources) == 0 {
		fmt.Fprintf(&b, "Resources: none\n")
	} else {
		fmt.Fprintf(&b, "Resources:\n")
		for _, r := range p.Status.Resources {
			fmt.Fprintf(&b, "  %-16s %s\n", Printable(strings.Join(r.Actions, ",")), Printable(r.Address))
		}
		if p.Status.Truncated {
			fmt.Fprintf(&b, "  … (truncated: the plan changes more resources than are listed)\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// planTarget is the plan's Kind/name, Printable.
func planTarget(p *runsv1alpha1.Plan) string {
	return Printable(p.Spec.Target.Kind + "/" + p.Spec.Target.Name)
}

// approve shows the plan, asks unless yes, and POSTs the approval.
func (o *Options) approve(ctx context.Context, name, hash string, yes, dryRun bool) error {
	c, plan, err := o.getPlan(ctx, name)
	if err != nil {
		return err
	}
	if err := PrintPlan(o.Out, plan); err != nil {
		return err
	}
	if hash == "" {
		hash = plan.Status.ApprovalHash
	}
	if hash == "" {
		return fmt.Errorf("plan %s has no hash to approve yet (phase %s); wait until it is AwaitingApproval", name, Printable(orNone(string(plan.Status.Phase))))
	}
	if !yes {
		ok, err := confirm(o.In, o.Out, fmt.Sprintf("\nApprove plan %s of %s with hash %s? [y/N]: ", Printable(name), planTarget(plan), Printable(hash)))
		if err != nil {
			return err
		}
		if !ok {
			_, err := fmt.Fprintln(o.Out, "Not approved: nothing was written.")
			return err
		}
	}
	approval := &runsv1alpha1.PlanApproval{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       runsv1alpha1.PlanApprovalSpec{PlanHash: hash},
	}
	var opts []client.SubResourceCreateOption
	if dryRun {
		opts = append(opts, client.DryRunAll)
	}
	if err := c.SubResource("approval").Create(ctx, plan, approval, opts...); err != nil {
		return notApproved(ctx, c, plan, err)
	}
	verb := "Approved"
	if dryRun {
		verb = "Would approve (dry run)"
	}
	fmt.Fprintf(o.Out, "%s plan %s for %s as %s.\n", verb, Printable(name), planTarget(plan), Printable(approval.Status.ApprovedBy))
	if approval.Status.Message != "" {
		fmt.Fprintln(o.Out, Printable(approval.Status.Message))
	}
	return nil
}

// approvalError turns the server's answer into a clear error that keeps its message.
func approvalError(name string, err error) error {
	var status apierrors.APIStatus
	msg := err.Error()
	if errors.As(err, &status) && status.Status().Message != "" {
		msg = status.Status().Message
	}
	msg = Printable(msg)
	switch {
	case apierrors.IsConflict(err):
		return fmt.Errorf("plan %s was not approved (409 Conflict): %s", name, msg)
	case apierrors.IsNotFound(err):
		return fmt.Errorf("plan %s was not approved (404 Not Found): %s", name, msg)
	case apierrors.IsInvalid(err):
		return fmt.Errorf("plan %s was not approved (422 Invalid): %s", name, msg)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("plan %s was not approved (403 Forbidden): %s; an approver needs create on plans/approval, e.g. a RoleBinding to ClusterRole captf-plan-approver", name, msg)
	}
	return fmt.Errorf("approving plan %s: %w", name, err)
}

// confirm asks a yes/no question; only y or yes (any case) is yes.
func confirm(in io.Reader, out io.Writer, question string) (bool, error) {
	if _, err := io.WriteString(out, question); err != nil {
		return false, err
	}
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("reading the answer: %w", err)
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}

package app

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/decide"
	"github.com/captf/captf/jobs"
)

func newReplanCommand(o *Options) *cobra.Command {
	var kind string
	cmd := &cobra.Command{
		Use:   "replan TARGET",
		Short: "Ask for a fresh plan of a TerraformCluster under spec.applyPolicy Manual",
		Long: "Write the time to the annotation " + jobs.AnnotationReplan + " of the TerraformCluster named\n" +
			"TARGET. While an apply of it is due (a plan waits for approval, or an approved plan has not\n" +
			"been applied yet), the controller then starts a plan Job of the current inputs (decision\n" +
			"reason " + decide.ReplanRequested + "), once per request: the plan Job records the request it\n" +
			"serves. Approve the new plan with `kubectl captf approve --all-for TARGET`. With no apply\n" +
			"due the request waits for the next one. The plan's backoff window is not skipped. An\n" +
			"object not under applyPolicy Manual is refused: its applies are not planned first.\n\n" +
			"Rights needed: get and patch on terraformclusters (infrastructure.cluster.x-k8s.io), granted\n" +
			"by ClusterRole " + RoleOperator + "; list on runs.runs.captf.io to show an open backoff window.",
		Example: "  # Plan the TerraformCluster web again, e.g. after the infrastructure changed outside it\n" +
			"  kubectl captf replan web\n\n" +
			"  # Then approve the new plan\n" +
			"  kubectl captf approve --all-for web",
		Args:              cobra.ExactArgs(1),
		GroupID:           GroupOperate,
		Annotations:       map[string]string{RoleAnnotation: RoleOperator},
		ValidArgsFunction: CompleteTargets(o),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, t, err := o.lookupTarget(cmd.Context(), args[0], kind)
			if err != nil {
				return err
			}
			planned, ok := t.Obj.(infrav1.Planned)
			if !ok {
				return fmt.Errorf("%s has no apply policy: only a TerraformCluster with spec.applyPolicy: Manual plans before it applies", t)
			}
			if !planned.ManualApply() {
				return fmt.Errorf("%s is not in Manual approval mode (spec.applyPolicy is not Manual): its due applies run without a plan to approve, so there is nothing to plan again", t)
			}
			at := o.Now().UTC().Format(time.RFC3339Nano)
			if err := setAnnotation(cmd.Context(), c, t, jobs.AnnotationReplan, &at); err != nil {
				return err
			}
			fmt.Fprintf(o.Out, "Requested a fresh plan of %s (%s=%s).\n", t, jobs.AnnotationReplan, at)
			if plan := *planned.PlanPreview(); plan != nil {
				fmt.Fprintf(o.Out, "It replaces the plan %s of run %s; follow it with `kubectl captf runs %s`.\n", Printable(plan.PlanHash), Printable(plan.Job), t.Obj.GetName())
			} else {
				fmt.Fprintf(o.Out, "No plan waits now: the controller plans when an apply is next due (`kubectl captf why %s` says what is due).\n", t.Obj.GetName())
			}
			return o.writeBackoffs(cmd.Context(), c, t, "replan")
		},
	}
	addKindFlag(cmd, &kind)
	return cmd
}

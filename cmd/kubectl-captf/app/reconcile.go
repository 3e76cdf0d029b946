package app

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
)

func newReconcileCommand(o *Options) *cobra.Command {
	var kind string
	cmd := &cobra.Command{
		Use:   "reconcile TARGET",
		Short: "Ask the controller for a pass of a captf object now, without skipping a backoff window",
		Long: "Write the time to the annotation " + jobs.AnnotationReconcileRequestedAt + " of the TerraformCluster,\n" +
			"TerraformMachine or TerraformMachinePool named TARGET. The change brings a pass of the\n" +
			"controller at once instead of at its next scheduled look: it books finished runs and starts\n" +
			"what is due now. It decides as any pass does, so it does not skip an open backoff window\n" +
			"(the command says until when each stays open), does not start a drift check before its\n" +
			"interval, and starts nothing on a suspended object. The pass has happened once the\n" +
			"object's status.lastHandledReconcileAt shows the value written.\n\n" +
			patchObjectsRights + ";\n" +
			"list on runs.runs.captf.io to show the open backoff windows.",
		Example: "  # Look at the TerraformCluster web again now, e.g. after fixing a variable Secret\n" +
			"  kubectl captf reconcile web",
		Args:              cobra.ExactArgs(1),
		GroupID:           GroupOperate,
		Annotations:       map[string]string{RoleAnnotation: RoleOperator},
		ValidArgsFunction: CompleteTargets(o),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, t, err := o.lookupTarget(cmd.Context(), args[0], kind)
			if err != nil {
				return err
			}
			// Nanoseconds: two requests in one second are two changes, so two passes.
			at := o.Now().UTC().Format(time.RFC3339Nano)
			if err := setAnnotation(cmd.Context(), c, t, jobs.AnnotationReconcileRequestedAt, &at); err != nil {
				return err
			}
			fmt.Fprintf(o.Out, "Requested a pass of %s (%s=%s).\n", t, jobs.AnnotationReconcileRequestedAt, at)
			if _, paused := t.Obj.GetAnnotations()[workspace.PausedAnnotation]; paused {
				fmt.Fprintf(o.Out, "%s is suspended: the pass starts nothing until `kubectl captf resume %s`.\n", t, t.Obj.GetName())
			}
			return o.writeBackoffs(cmd.Context(), c, t, "reconcile")
		},
	}
	addKindFlag(cmd, &kind)
	return cmd
}

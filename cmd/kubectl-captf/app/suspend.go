package app

import (
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/utils/ptr"

	"github.com/captf/captf/controller/workspace"
)

func newSuspendCommand(o *Options) *cobra.Command {
	var kind string
	cmd := &cobra.Command{
		Use:   "suspend TARGET",
		Short: "Pause a captf object: the controller starts no run of it until it is resumed",
		Long: "Set Cluster API's pause annotation (" + workspace.PausedAnnotation + ") on the TerraformCluster,\n" +
			"TerraformMachine or TerraformMachinePool named TARGET. The controller then books the\n" +
			"object's finished runs but starts none, and its Paused condition says so; a run already\n" +
			"running finishes. `kubectl captf why TARGET` shows the pause, and `kubectl captf resume\n" +
			"TARGET` removes it. TARGET is looked up among the three kinds; --kind picks one when\n" +
			"several have the name.\n\n" +
			patchObjectsRights + ".",
		Example: "  # Stop new runs of the TerraformCluster web\n" +
			"  kubectl captf suspend web\n\n" +
			"  # Suspend the TerraformMachine web-0 when a TerraformCluster has the same name\n" +
			"  kubectl captf suspend web-0 --kind=machine",
		Args:              cobra.ExactArgs(1),
		GroupID:           GroupOperate,
		Annotations:       map[string]string{RoleAnnotation: RoleOperator},
		ValidArgsFunction: CompleteTargets(o),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, t, err := o.lookupTarget(cmd.Context(), args[0], kind)
			if err != nil {
				return err
			}
			if _, paused := t.Obj.GetAnnotations()[workspace.PausedAnnotation]; paused {
				_, err := fmt.Fprintf(o.Out, "%s is already suspended (annotation %s).\n", t, workspace.PausedAnnotation)
				return err
			}
			if err := setAnnotation(cmd.Context(), c, t, workspace.PausedAnnotation, ptr.To("true")); err != nil {
				return err
			}
			fmt.Fprintf(o.Out, "Suspended %s: the controller starts no run of it until `kubectl captf resume %s`.\n", t, t.Obj.GetName())
			if active := t.Obj.WorkspaceStatus().ActiveJob; active != nil {
				fmt.Fprintf(o.Out, "The running %s run %s finishes first.\n", Printable(string(active.Operation)), Printable(active.Name))
			}
			return nil
		},
	}
	addKindFlag(cmd, &kind)
	return cmd
}

package app

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/captf/captf/controller/workspace"
)

func newResumeCommand(o *Options) *cobra.Command {
	var kind string
	cmd := &cobra.Command{
		Use:   "resume TARGET",
		Short: "Resume a suspended captf object: remove the pause annotation",
		Long: "Remove Cluster API's pause annotation (" + workspace.PausedAnnotation + ") from the\n" +
			"TerraformCluster, TerraformMachine or TerraformMachinePool named TARGET; the change brings a\n" +
			"pass of the controller at once. A pause that comes from the Cluster API Cluster's\n" +
			"spec.paused (clusterctl move sets it) is the Cluster's: resume leaves it alone and says so.\n\n" +
			patchObjectsRights + ";\n" +
			"get on clusters.cluster.x-k8s.io to tell whether the Cluster still pauses it (optional).",
		Example: "  # Let the controller run the TerraformCluster web again\n" +
			"  kubectl captf resume web",
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
				if err := setAnnotation(cmd.Context(), c, t, workspace.PausedAnnotation, nil); err != nil {
					return err
				}
				fmt.Fprintf(o.Out, "Resumed %s: removed the annotation %s.\n", t, workspace.PausedAnnotation)
			} else {
				fmt.Fprintf(o.Out, "%s is not suspended by the annotation %s.\n", t, workspace.PausedAnnotation)
			}
			// The object as now written: only the Cluster can still pause it.
			delete(t.Obj.GetAnnotations(), workspace.PausedAnnotation)
			if pause, err := workspace.PauseOf(cmd.Context(), c, t.Obj); err == nil && pause.Paused {
				fmt.Fprintf(o.Out, "It stays paused: %s (resume that Cluster, e.g. once clusterctl move is done).\n", Printable(pause.Why))
			}
			return nil
		},
	}
	addKindFlag(cmd, &kind)
	return cmd
}

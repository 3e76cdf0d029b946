package app

import (
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/fields"
	kubectlget "k8s.io/kubectl/pkg/cmd/get"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
	"k8s.io/kubectl/pkg/util/templates"

	runsv1alpha1 "github.com/captf/captf/apis/runs/v1alpha1"
)

// The resources `runs` and `plans` list, fully qualified so that no other API's runs or plans
// are meant.
const (
	runsResource  = "runs." + runsv1alpha1.GroupName
	plansResource = "plans." + runsv1alpha1.GroupName
)

// byCreation is the default --sort-by: oldest first, so the newest run is printed last, next to
// the prompt. kubectl get sorts ascending only, and the plugin prints what it prints.
const byCreation = ".metadata.creationTimestamp"

func newRunsCommand(o *Options) *cobra.Command {
	return newListCommand(o, runsResource, &cobra.Command{
		Use:     "runs [TARGET]",
		GroupID: GroupInspect,
		Short:   "List runs, of the namespace or of one object, oldest first",
		Long: `List the runs of the namespace, or with TARGET only the runs of the objects of that name,
exactly as kubectl get runs prints them: the server's columns, -o wide, yaml, json, name,
jsonpath and custom-columns, and --watch.

 TARGET narrows by the field selector spec.target.name=TARGET, and --kind by
 spec.target.kind. The list is sorted by creation, oldest first and the newest last; --sort-by
 sorts by another field. NEXT-RETRY is the time left in the backoff window of the operation's
 newest counted failure.

Rights needed: get, list and watch on runs (runs.captf.io), granted by the ClusterRole
captf-runs-view, which the view, edit and admin roles aggregate.`,
		Example: templates.Examples(`
			# List the runs of the current namespace, the newest last
			kubectl captf runs

			# List the runs of the TerraformCluster web, with the retention and the error
			kubectl captf runs web --kind=cluster -o wide

			# Watch the runs of web as they start and finish
			kubectl captf runs web --watch

			# Print the error of each failed run of every namespace
			kubectl captf runs -A --field-selector=status.phase=Failed -o custom-columns=NAME:.metadata.name,ERROR:.status.error.summary`),
		Annotations: map[string]string{RoleAnnotation: RoleRunsView},
	})
}

func newPlansCommand(o *Options) *cobra.Command {
	return newListCommand(o, plansResource, &cobra.Command{
		Use:     "plans [TARGET]",
		GroupID: GroupInspect,
		Short:   "List plans, of the namespace or of one object, oldest first",
		Long: `List the plans of the namespace, or with TARGET only the plans of the objects of that name,
exactly as kubectl get plans prints them: the server's columns, -o wide, yaml, json, name,
jsonpath and custom-columns, and --watch. kubectl captf plan PLAN shows one plan's resources.

 TARGET narrows by the field selector spec.target.name=TARGET, and --kind by
 spec.target.kind. The list is sorted by creation, oldest first and the newest last.

Rights needed: get, list and watch on plans (runs.captf.io), granted by the ClusterRole
captf-plan-approver, and by captf-plans-edit, which the edit and admin roles aggregate.`,
		Example: templates.Examples(`
			# List the plans of the current namespace
			kubectl captf plans

			# List the plans of web that wait for an approval, with the hash to approve
			kubectl captf plans web --field-selector=status.phase=AwaitingApproval -o wide

			# Print only the names of web's plans
			kubectl captf plans web -o name`),
		Annotations: map[string]string{RoleAnnotation: RolePlanApprover},
	})
}

// newListCommand makes cmd list resource with kubectl's own get: its flags, its printers and
// its watch, narrowed to TARGET and --kind by field selectors.
func newListCommand(o *Options, resource string, cmd *cobra.Command) *cobra.Command {
	get := kubectlget.NewGetOptions("kubectl", o.IOStreams)
	*get.PrintFlags.HumanReadableFlags.SortBy = byCreation
	var kind string
	cmd.Args = cobra.MaximumNArgs(1)
	cmd.ValidArgsFunction = CompleteTargets(o)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		target := ""
		if len(args) == 1 {
			target = args[0]
		}
		selector, err := targetSelector(target, kind, get.FieldSelector)
		if err != nil {
			return err
		}
		get.FieldSelector = selector
		// kubectl warns that a watch ignores --sort-by; only warn when it was asked for.
		if (get.Watch || get.WatchOnly) && !cmd.Flags().Changed("sort-by") {
			*get.PrintFlags.HumanReadableFlags.SortBy = ""
		}
		f := cmdutil.NewFactory(cmdutil.NewMatchVersionFlags(o.Flags))
		if err := get.Complete(f, cmd, []string{resource}); err != nil {
			return err
		}
		if err := get.Validate(); err != nil {
			return err
		}
		return get.Run(f, []string{resource})
	}
	get.PrintFlags.AddFlags(cmd)
	flags := cmd.Flags()
	flags.BoolVarP(&get.Watch, "watch", "w", get.Watch, "After listing the requested objects, watch for changes.")
	flags.BoolVar(&get.WatchOnly, "watch-only", get.WatchOnly, "Watch for changes to the requested objects, without listing them first.")
	flags.BoolVar(&get.OutputWatchEvents, "output-watch-events", get.OutputWatchEvents, "Output watch event objects when --watch or --watch-only is used. Existing objects are output as initial ADDED events.")
	flags.BoolVarP(&get.AllNamespaces, "all-namespaces", "A", get.AllNamespaces, "If present, list the requested objects across all namespaces. Namespace in current context is ignored even if specified with --namespace.")
	flags.StringVar(&get.FieldSelector, "field-selector", get.FieldSelector, "Selector (field query) to filter on, supports '=', '==', and '!='.(e.g. --field-selector status.phase=Failed). The fields are spec.target.kind, spec.target.name, status.phase and the others kubectl explain lists.")
	flags.StringVar(&kind, "kind", "", "Only the objects of this kind: cluster, machine or machinepool (field selector spec.target.kind).")
	cmdutil.AddLabelSelectorFlagVar(cmd, &get.LabelSelector)
	cmdutil.AddChunkSizeFlag(cmd, &get.ChunkSize)
	cmdutil.CheckErr(cmd.RegisterFlagCompletionFunc("kind", CompleteKinds))
	return cmd
}

// targetSelector is the field selector of a list: extra (the --field-selector), and with target
// or kind set spec.target.name and spec.target.kind.
func targetSelector(target, kind, extra string) (string, error) {
	var terms []fields.Selector
	if extra != "" {
		s, err := fields.ParseSelector(extra)
		if err != nil {
			return "", fmt.Errorf("invalid --field-selector %q: %w", extra, err)
		}
		terms = append(terms, s)
	}
	if target != "" {
		terms = append(terms, fields.OneTermEqualSelector("spec.target.name", target))
	}
	if kind != "" {
		info, err := kindNamed(kind)
		if err != nil {
			return "", err
		}
		terms = append(terms, fields.OneTermEqualSelector("spec.target.kind", info.Kind))
	}
	if len(terms) == 0 {
		return "", nil
	}
	return fields.AndSelectors(terms...).String(), nil
}

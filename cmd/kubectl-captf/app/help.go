package app

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/kubectl/pkg/util/templates"
	"k8s.io/kubectl/pkg/util/term"
)

// Command groups of the root help, as kubectl groups its own commands.
const (
	GroupInspect = "inspect"
	GroupOperate = "operate"
)

// RoleAnnotation is the annotation of every command naming the ClusterRole that grants the
// rights its "Rights needed:" paragraph lists; a 403 names it (see Actionable).
const RoleAnnotation = "captf.io/role"

// The ClusterRoles a command's RoleAnnotation names (artifacts/apiserver/user-roles.yaml).
const (
	RoleRunsView     = "captf-runs-view"
	RolePlanApprover = "captf-plan-approver"
	RoleOperator     = "captf-operator"
	// RoleStateUnlocker is aggregated nowhere: it may update every Lease of the namespace.
	RoleStateUnlocker = "captf-state-unlocker"
)

// displayName is how people type the plugin: kubectl finds kubectl-captf on PATH.
const displayName = "kubectl captf"

// rootLong is the root command's description.
const rootLong = `kubectl captf reads the runs and plans of captf, the OpenTofu infrastructure provider for
Cluster API, and acts on them.

 Runs and plans are served by the aggregated API runs.captf.io. Every command connects with
 your kubeconfig and acts with your own rights.`

// useKubectlHelp gives root and every command under it kubectl's help layout: the
// description, Examples, the commands by group (root only), Options in kubectl's flag format,
// Usage, and a pointer to `kubectl captf options` for the kubeconfig flags every command
// inherits. The groups are read when help is printed, so commands added later are listed.
func useKubectlHelp(root *cobra.Command) {
	root.SetHelpFunc(func(cmd *cobra.Command, _ []string) {
		if err := writeHelp(cmd.OutOrStdout(), cmd); err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "error: writing the help: %v\n", err)
		}
	})
	root.SetUsageFunc(func(cmd *cobra.Command) error {
		return writeUsage(cmd.OutOrStderr(), cmd)
	})
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return fmt.Errorf("%w\nSee '%s --help' for usage", err, cmd.CommandPath())
	})
}

// newOptionsCommand prints the flags every command inherits, like `kubectl options`.
func newOptionsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "options",
		Short: "Print the list of flags inherited by all commands",
		Long:  "Print the list of flags inherited by all commands: the kubeconfig, context, namespace and connection flags of kubectl.",
		Example: templates.Examples(`
			# Print flags inherited by all commands
			kubectl captf options`),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var b bytes.Buffer
			b.WriteString("The following options can be passed to any command:\n\n")
			writeFlags(&b, cmd.InheritedFlags())
			_, err := cmd.OutOrStdout().Write(b.Bytes())
			return err
		},
	}
}

func writeHelp(w io.Writer, cmd *cobra.Command) error {
	var b bytes.Buffer
	text := cmd.Long
	if text == "" {
		text = cmd.Short
	}
	b.WriteString(strings.TrimSpace(text))
	b.WriteString("\n\n")
	if _, err := w.Write(b.Bytes()); err != nil {
		return err
	}
	return writeUsage(w, cmd)
}

// writeUsage writes everything below the description.
func writeUsage(w io.Writer, cmd *cobra.Command) error {
	var b bytes.Buffer
	if cmd.HasExample() {
		fmt.Fprintf(&b, "Examples:\n%s\n\n", strings.TrimRight(cmd.Example, " \n"))
	}
	if !cmd.HasParent() {
		writeCommands(&b, cmd)
	}
	local := pflag.NewFlagSet("local", pflag.ContinueOnError)
	cmd.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "help" {
			local.AddFlag(f)
		}
	})
	if local.HasAvailableFlags() {
		b.WriteString("Options:\n")
		writeFlags(&b, local)
	}
	if cmd.Runnable() || !cmd.HasParent() {
		use := cmd.UseLine()
		if !cmd.Runnable() {
			use = cmd.CommandPath() + " [flags]"
		}
		fmt.Fprintf(&b, "Usage:\n  %s [options]\n\n", use)
	}
	root := cmd.Root()
	if !cmd.HasParent() {
		fmt.Fprintf(&b, "Use \"%s <command> --help\" for more information about a given command.\n", root.CommandPath())
	}
	if cmd.Name() != "options" {
		fmt.Fprintf(&b, "Use \"%s options\" for a list of global command-line options (applies to all commands).\n", root.CommandPath())
	}
	_, err := w.Write(b.Bytes())
	return err
}

// writeCommands lists the root's commands under their groups' titles, then the others.
func writeCommands(b *bytes.Buffer, root *cobra.Command) {
	width := 0
	for _, c := range root.Commands() {
		if listed(c) {
			width = max(width, len(c.Name()))
		}
	}
	section := func(title, groupID string) {
		var lines []string
		for _, c := range root.Commands() {
			if listed(c) && c.GroupID == groupID {
				lines = append(lines, fmt.Sprintf("  %-*s   %s", width, c.Name(), c.Short))
			}
		}
		if len(lines) > 0 {
			fmt.Fprintf(b, "%s\n%s\n\n", title, strings.Join(lines, "\n"))
		}
	}
	for _, g := range root.Groups() {
		section(g.Title, g.ID)
	}
	section("Other Commands:", "")
}

// listed is whether the root's help lists c: kubectl leaves out help and options.
func listed(c *cobra.Command) bool {
	return c.IsAvailableCommand() && c.Name() != "help" && c.Name() != "options"
}

// writeFlags writes flags in kubectl's format: `-o, --output=”:` and the usage below it.
func writeFlags(b *bytes.Buffer, flags *pflag.FlagSet) {
	limit, err := term.GetWordWrapperLimit()
	if err != nil {
		limit = 0
	}
	printer := templates.NewHelpFlagPrinter(b, limit)
	flags.VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			printer.PrintHelpFlag(f)
		}
	})
}

// rights is the closing paragraph of a command's Long: the API rights it uses and the
// ClusterRole that grants them.
func rights(text string) string {
	return "\n\nRights needed: " + text
}

package app

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// TestEveryCommandIsDocumented: every command a person runs has an example, a group in the
// root help, a "Rights needed:" paragraph and the ClusterRole that grants those rights.
func TestEveryCommandIsDocumented(t *testing.T) {
	root := NewCommand(genericiooptions.NewTestIOStreamsDiscard())
	var walk func(*cobra.Command)
	walk = func(cmd *cobra.Command) {
		for _, c := range cmd.Commands() {
			walk(c)
		}
		if !cmd.HasParent() || cmd.Hidden || cmd.Name() == "help" || cmd.Name() == "options" {
			return
		}
		t.Run(cmd.Name(), func(t *testing.T) {
			if cmd.Example == "" {
				t.Error("no Example")
			}
			if cmd.GroupID != GroupInspect && cmd.GroupID != GroupOperate {
				t.Errorf("GroupID %q, want %q or %q", cmd.GroupID, GroupInspect, GroupOperate)
			}
			if !strings.Contains(cmd.Long, "\n\nRights needed: ") {
				t.Error("Long has no paragraph beginning \"Rights needed:\"")
			}
			if cmd.Annotations[RoleAnnotation] == "" {
				t.Errorf("no %s annotation", RoleAnnotation)
			}
		})
	}
	walk(root)
}

func TestHelpReadsLikeKubectls(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		want    []string
		notWant []string
	}{
		{
			name: "the root lists the commands by group and points at options",
			args: []string{"--help"},
			want: []string{
				"kubectl captf reads the runs and plans",
				"Inspect runs and plans:\n  runs ",
				"Operate on objects:\n  approve ",
				"Usage:\n  kubectl captf [flags] [options]",
				`Use "kubectl captf <command> --help" for more information about a given command.`,
				`Use "kubectl captf options" for a list of global command-line options (applies to all commands).`,
			},
			notWant: []string{"--kubeconfig", "completion", "  options "},
		},
		{
			name: "a command shows its examples, its own flags in kubectl's format and its usage",
			args: []string{"runs", "--help"},
			want: []string{
				"Examples:\n  # List the runs of the current namespace",
				"Options:\n",
				"    -o, --output='':\n\tOutput format.",
				"    --sort-by='.metadata.creationTimestamp':\n",
				"Usage:\n  kubectl captf runs [TARGET] [flags] [options]",
				`Use "kubectl captf options" for a list of global command-line options`,
			},
			notWant: []string{"--kubeconfig", "--help"},
		},
		{
			name: "options lists the kubeconfig flags",
			args: []string{"options"},
			want: []string{"The following options can be passed to any command:", "    --kubeconfig='':\n", "    -n, --namespace='':\n"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			streams, _, out, _ := genericiooptions.NewTestIOStreams()
			root := NewCommand(streams)
			root.SetArgs(tc.args)
			if err := root.Execute(); err != nil {
				t.Fatal(err)
			}
			for _, want := range tc.want {
				if !strings.Contains(out.String(), want) {
					t.Errorf("help lacks %q:\n%s", want, out)
				}
			}
			for _, notWant := range tc.notWant {
				if strings.Contains(out.String(), notWant) {
					t.Errorf("help has %q:\n%s", notWant, out)
				}
			}
		})
	}
}

// TestAFlagErrorPointsAtHelp: a wrong flag says where the usage is, as kubectl does.
func TestAFlagErrorPointsAtHelp(t *testing.T) {
	root := NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}})
	root.SetArgs([]string{"runs", "--bogus"})
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "See 'kubectl captf runs --help' for usage") {
		t.Fatalf("error = %v", err)
	}
}

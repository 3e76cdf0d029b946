// Command runner runs inside a captf Job: `runner copy` installs it into the Job's shared volume
// and `runner run` drives OpenTofu/Terraform for one operation and reports the result as the
// container's termination message. This file holds only flags and wiring; the work is in
// package runner.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/captf/captf/runner"
)

func main() {
	// SIGTERM comes from the kubelet (drain, eviction, Job deletion, deadline); SIGINT from a
	// terminal. Both become a stop request that the runner forwards to the runtime.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// exitCode ends the command with a code other than 0 without being a usage error.
type exitCode int

// Error makes exitCode an error that carries the code through cobra.
func (c exitCode) Error() string { return fmt.Sprintf("exit %d", int(c)) }

// execute runs the command line args and returns the exit code.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := newCommand(stdout, stderr)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	var code exitCode
	switch {
	case err == nil:
		return runner.ExitOK
	case errors.As(err, &code):
		return int(code)
	default:
		// Everything else cobra returns is a bad command, flag or argument.
		fmt.Fprintf(stderr, "runner: %v\nRun 'runner --help' for usage.\n", err)
		return runner.ExitUsage
	}
}

func newCommand(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "runner",
		Short:         "Runs OpenTofu/Terraform for one captf Job",
		Long:          "runner runs inside a captf Job. Exit codes: 0 success, 1 failure, 2 usage error.",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_ = cmd.Help()
			return errors.New("a command is required")
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newCopyCommand(stderr), newRunCommand(stdout, stderr), newVersionCommand(stdout))
	return root
}

func newCopyCommand(stderr io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "copy <dest>",
		Short: "Copy this binary to dest with mode 0755 (the init container installs the runner this way)",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			self, err := os.Executable()
			if err == nil {
				err = runner.Copy(self, args[0])
			}
			if err != nil {
				fmt.Fprintf(stderr, "runner: copy: %v\n", err)
				return exitCode(runner.ExitFailure)
			}
			return nil
		},
	}
}

func newVersionCommand(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the runner's version",
		Args:  cobra.NoArgs,
		Run: func(*cobra.Command, []string) {
			fmt.Fprintf(stdout, "runner %s\n", runner.Version())
		},
	}
}

func newRunCommand(stdout, stderr io.Writer) *cobra.Command {
	o := runner.NewOptions()
	cmd := &cobra.Command{
		Use:   "run --op=<op> [flags]",
		Short: "Run one operation: apply, plan, destroy, refresh, drift or restore",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Environ = os.Environ()
			o.Stdout, o.Stderr = stdout, stderr
			if err := o.Validate(); err != nil {
				runner.WriteUsageResult(o.Op, o.ResultFile, err)
				return err
			}
			_, code := runner.Run(cmd.Context(), o)
			if code != runner.ExitOK {
				return exitCode(code)
			}
			return nil
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		runner.WriteUsageResult(o.Op, o.ResultFile, err)
		return err
	})
	o.AddFlags(cmd.Flags())
	return cmd
}

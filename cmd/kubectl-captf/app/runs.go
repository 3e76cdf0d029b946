package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	runsv1alpha1 "github.com/captf/captf/apis/runs/v1alpha1"
)

func newRunsCommand(o *Options) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "runs [TARGET]",
		Short: "List the runs of a namespace, or of one target object, newest first",
		Long: "List the runs of the namespace, newest first, read from the aggregated runs API. With TARGET,\n" +
			"only the runs of the objects of that name (field selector spec.target.name=TARGET).\n" +
			"NEXT-RETRY says when a failed operation may run again: \"in 45s\" while its backoff window\n" +
			"is open, \"now\" once it has passed, and \"—\" when the run carries no window.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "" && output != "json" {
				return fmt.Errorf("unsupported output format %q: only json", output)
			}
			target := ""
			if len(args) == 1 {
				target = args[0]
			}
			runs, err := o.listRuns(cmd.Context(), target)
			if err != nil {
				return err
			}
			if output == "json" {
				return writeJSON(o.Out, runs)
			}
			if len(runs.Items) == 0 {
				_, err := fmt.Fprintln(o.ErrOut, "No runs found.")
				return err
			}
			return PrintRuns(o.Out, runs.Items, o.Now())
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json")
	return cmd
}

// listRuns lists the runs of the namespace, or of the target's name, newest first.
func (o *Options) listRuns(ctx context.Context, target string) (*runsv1alpha1.RunList, error) {
	ns, err := o.namespace()
	if err != nil {
		return nil, err
	}
	c, err := o.client()
	if err != nil {
		return nil, err
	}
	opts := []client.ListOption{client.InNamespace(ns)}
	if target != "" {
		opts = append(opts, client.MatchingFields{"spec.target.name": target})
	}
	var runs runsv1alpha1.RunList
	if err := c.List(ctx, &runs, opts...); err != nil {
		return nil, fmt.Errorf("listing runs in namespace %s: %w", ns, err)
	}
	SortNewestFirst(runs.Items)
	runs.APIVersion, runs.Kind = runsv1alpha1.SchemeGroupVersion.String(), "RunList"
	return &runs, nil
}

// SortNewestFirst orders runs by creation time, newest first; runs created in the same second
// are ordered by attempt, then name, both descending.
func SortNewestFirst(runs []runsv1alpha1.Run) {
	sort.SliceStable(runs, func(i, j int) bool {
		a, b := runs[i], runs[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return b.CreationTimestamp.Before(&a.CreationTimestamp)
		}
		if a.Spec.Attempt != b.Spec.Attempt {
			return a.Spec.Attempt > b.Spec.Attempt
		}
		return a.Name > b.Name
	})
}

// PrintRuns writes the runs table.
func PrintRuns(w io.Writer, runs []runsv1alpha1.Run, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTARGET\tOP\tATTEMPT\tRETRY\tPHASE\tAGE\tDURATION\tNEXT-RETRY\tERROR")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%s/%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n",
			r.Name, r.Spec.Target.Kind, r.Spec.Target.Name, orNone(r.Spec.Operation), r.Spec.Attempt, r.Status.RetryNumber,
			orNone(string(r.Status.Phase)), Age(r.CreationTimestamp.Time, now), runDuration(r), NextRetry(r.Status.Backoff, now), runError(r.Status.Error))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing the runs table: %w", err)
	}
	return nil
}

func runDuration(r runsv1alpha1.Run) string {
	if r.Status.Duration == nil {
		return None
	}
	return r.Status.Duration.Duration.Round(time.Second).String()
}

func runError(e *runsv1alpha1.RunError) string {
	switch {
	case e == nil:
		return None
	case e.Step != "":
		return e.Kind + "/" + e.Step
	}
	return orNone(e.Kind)
}

func orNone(s string) string {
	if s == "" {
		return None
	}
	return s
}

func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding JSON: %w", err)
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

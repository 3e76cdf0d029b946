package app

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	runsv1alpha1 "github.com/captf/captf/apis/runs/v1alpha1"
	"github.com/captf/captf/jobs"
)

func newHistoryCommand(o *Options) *cobra.Command {
	var kind, output string
	cmd := &cobra.Command{
		Use:   "history TARGET",
		Short: "Show every retained run of an object as a timeline per operation",
		Long: "List the retained runs of the objects named TARGET from the aggregated runs API and show\n" +
			"them per operation (apply, plan, destroy, refresh, drift, restore), oldest first: each run's\n" +
			"attempt, retry number, phase, start, duration and error, and the backoff window its failure\n" +
			"opened (open until a time, or passed). Runs are what pruning kept: every running run, each\n" +
			"operation's newest success and unresolved failure, and the rest within the history limits.\n" +
			"--kind keeps the runs of one kind when several objects have the name.\n\n" +
			"Rights needed: list on runs.runs.captf.io, granted by ClusterRole " + RoleRunsView + "\n" +
			"(aggregated to view, edit and admin).",
		Example: "  # The timeline of the TerraformCluster web\n" +
			"  kubectl captf history web\n\n" +
			"  # The same as YAML, for a script\n" +
			"  kubectl captf history web -o yaml",
		Args:              cobra.ExactArgs(1),
		GroupID:           GroupInspect,
		Annotations:       map[string]string{RoleAnnotation: RoleRunsView},
		ValidArgsFunction: CompleteTargets(o),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "" && output != "json" && output != "yaml" {
				return fmt.Errorf("unsupported output format %q: json or yaml", output)
			}
			kindName := ""
			if kind != "" {
				info, err := kindNamed(kind)
				if err != nil {
					return err
				}
				kindName = info.Kind
			}
			runs, err := o.targetRuns(cmd.Context(), args[0], kindName)
			if err != nil {
				return err
			}
			h := BuildHistory(runs)
			switch output {
			case "json":
				return writeJSON(o.Out, h)
			case "yaml":
				b, err := yaml.Marshal(h)
				if err != nil {
					return fmt.Errorf("encoding YAML: %w", err)
				}
				_, err = o.Out.Write(b)
				return err
			}
			if len(h.Operations) == 0 {
				_, err := fmt.Fprintf(o.ErrOut, "No runs of %q found: none was created, or all were pruned.\n", args[0])
				return err
			}
			return PrintHistory(o.Out, h, o.Now())
		},
	}
	addKindFlag(cmd, &kind)
	cmd.Flags().StringVarP(&output, "output", "o", "", "Output format. One of: (json, yaml).")
	return cmd
}

// targetRuns lists the runs of the objects named name, of one kind when kind is set.
func (o *Options) targetRuns(ctx context.Context, name, kind string) ([]runsv1alpha1.Run, error) {
	ns, err := o.namespace()
	if err != nil {
		return nil, err
	}
	c, err := o.client()
	if err != nil {
		return nil, err
	}
	fields := client.MatchingFields{"spec.target.name": name}
	if kind != "" {
		fields["spec.target.kind"] = kind
	}
	var runs runsv1alpha1.RunList
	if err := c.List(ctx, &runs, client.InNamespace(ns), fields); err != nil {
		return nil, fmt.Errorf("listing the runs of %s in namespace %s: %w", name, ns, err)
	}
	return runs.Items, nil
}

// History is the timeline of an object's retained runs, per operation.
type History struct {
	// Operations are the timelines, by target kind and name, then in the order of jobs.Ops
	// (runs of an unknown operation last).
	Operations []OperationHistory `json:"operations"`
}

// OperationHistory is the timeline of one operation of one object, oldest run first.
type OperationHistory struct {
	Target    runsv1alpha1.Target `json:"target"`
	Operation string              `json:"operation"`
	Runs      []HistoryEntry      `json:"runs"`
}

// HistoryEntry is one run of a timeline.
type HistoryEntry struct {
	Name           string                `json:"name"`
	Attempt        int32                 `json:"attempt"`
	RetryNumber    int32                 `json:"retryNumber,omitempty"`
	Phase          runsv1alpha1.RunPhase `json:"phase,omitempty"`
	Created        metav1.Time           `json:"created"`
	StartTime      *metav1.Time          `json:"startTime,omitempty"`
	CompletionTime *metav1.Time          `json:"completionTime,omitempty"`
	Duration       *metav1.Duration      `json:"duration,omitempty"`
	// Backoff is the window this run's failure opened, on the operation's newest counted
	// failure only.
	Backoff *runsv1alpha1.Backoff  `json:"backoff,omitempty"`
	Error   *runsv1alpha1.RunError `json:"error,omitempty"`
}

// BuildHistory groups runs by target and operation, each timeline oldest first.
func BuildHistory(runs []runsv1alpha1.Run) History {
	sorted := append([]runsv1alpha1.Run(nil), runs...)
	SortOldestFirst(sorted)
	type key struct{ kind, name, op string }
	groups := map[key]*OperationHistory{}
	var keys []key
	for _, r := range sorted {
		k := key{r.Spec.Target.Kind, r.Spec.Target.Name, r.Spec.Operation}
		g, ok := groups[k]
		if !ok {
			g = &OperationHistory{Target: r.Spec.Target, Operation: r.Spec.Operation}
			groups[k] = g
			keys = append(keys, k)
		}
		g.Runs = append(g.Runs, HistoryEntry{
			Name: r.Name, Attempt: r.Spec.Attempt, RetryNumber: r.Status.RetryNumber, Phase: r.Status.Phase,
			Created: r.CreationTimestamp, StartTime: r.Status.StartTime, CompletionTime: r.Status.CompletionTime,
			Duration: r.Status.Duration, Backoff: r.Status.Backoff, Error: r.Status.Error,
		})
	}
	sort.SliceStable(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.kind != b.kind {
			return a.kind < b.kind
		}
		if a.name != b.name {
			return a.name < b.name
		}
		return opRank(a.op) < opRank(b.op)
	})
	h := History{Operations: []OperationHistory{}}
	for _, k := range keys {
		h.Operations = append(h.Operations, *groups[k])
	}
	return h
}

// opRank orders operations as jobs.Ops does; an unknown one comes last.
func opRank(op string) int {
	for i, o := range jobs.Ops() {
		if string(o) == op {
			return i
		}
	}
	return len(jobs.Ops())
}

// SortOldestFirst orders runs by creation time, oldest first; runs created in the same second
// by attempt, then name.
func SortOldestFirst(runs []runsv1alpha1.Run) {
	sort.SliceStable(runs, func(i, j int) bool {
		a, b := runs[i], runs[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		if a.Spec.Attempt != b.Spec.Attempt {
			return a.Spec.Attempt < b.Spec.Attempt
		}
		return a.Name < b.Name
	})
}

// PrintHistory writes the timelines: a heading per object, a table per operation.
func PrintHistory(w io.Writer, h History, now time.Time) error {
	var b strings.Builder
	var last runsv1alpha1.Target
	for i, op := range h.Operations {
		if i == 0 || op.Target != last {
			if i > 0 {
				b.WriteString("\n")
			}
			fmt.Fprintf(&b, "%s\n", Printable(op.Target.Kind+"/"+op.Target.Name))
			last = op.Target
		}
		fmt.Fprintf(&b, "  %s\n", Printable(orNone(op.Operation)))
		tw := tabwriter.NewWriter(&b, 0, 8, 3, ' ', 0)
		fmt.Fprintln(tw, "    ATTEMPT\tRETRY\tPHASE\tSTARTED\tDURATION\tBACKOFF\tERROR\tRUN")
		for _, r := range op.Runs {
			fmt.Fprintf(tw, "    %d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Attempt, r.RetryNumber, Printable(orNone(string(r.Phase))),
				startedAt(r), entryDuration(r), backoffWindow(r.Backoff, now), Printable(runError(r.Error)), Printable(r.Name))
		}
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("writing the history: %w", err)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func startedAt(r HistoryEntry) string {
	if r.StartTime == nil {
		return None
	}
	return r.StartTime.UTC().Format("2006-01-02T15:04:05Z")
}

func entryDuration(r HistoryEntry) string {
	if r.Duration == nil {
		return None
	}
	return r.Duration.Duration.Round(time.Second).String()
}

// backoffWindow says what a failure's window is: its delay and end, and whether it is still
// open at now.
func backoffWindow(b *runsv1alpha1.Backoff, now time.Time) string {
	if b == nil {
		return None
	}
	end := b.RetryAfter.UTC().Format("2006-01-02T15:04:05Z")
	if b.RetryAfter.After(now) {
		return fmt.Sprintf("%s, open until %s (%s)", b.Delay.Duration, end, Until(b.RetryAfter.Time, now))
	}
	return fmt.Sprintf("%s, passed at %s", b.Delay.Duration, end)
}

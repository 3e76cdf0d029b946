package app

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
	"k8s.io/kubectl/pkg/util/templates"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/decide"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
)

// kindNamed returns the kind a --kind value names (infrav1.Kinds' Name), so that `why` judges
// mutability exactly as the controller does.
func kindNamed(name string) (infrav1.KindInfo, error) {
	var names []string
	for _, k := range infrav1.Kinds {
		if k.Name == name {
			return k, nil
		}
		names = append(names, k.Name)
	}
	last := len(names) - 1
	return infrav1.KindInfo{}, fmt.Errorf("unknown --kind %q: %s or %s", name, strings.Join(names[:last], ", "), names[last])
}

func newWhyCommand(o *Options) *cobra.Command {
	kind := "cluster"
	cmd := &cobra.Command{
		Use:   "why TARGET",
		Short: "Explain which operation the controller would choose now for an object, and why",
		Long: "Read the object, its retained Jobs, its state Secret and its durable inputs Secret, and\n" +
			"hand them to the controller's own decision (controller/decide), read-only. Prints the\n" +
			"operation it would start now (or that it waits), the reason, and the backoff windows." +
			rights("get on the object (terraformclusters, terraformmachines or terraformmachinepools),\n"+
				"list on jobs, get on secrets, and optionally get on the Cluster API clusters (only to show a pause).\n"+
				"captf-runs-view names the runs this reads beside them; secrets need the edit or admin role."),
		GroupID: GroupInspect,
		Example: templates.Examples(`
			# Explain what the controller would do now for the TerraformCluster web
			kubectl captf why web

			# The same for the TerraformMachine web-md-0-x7k2p
			kubectl captf why web-md-0-x7k2p --kind=machine`),
		Annotations:       map[string]string{RoleAnnotation: RoleRunsView},
		ValidArgsFunction: CompleteTargets(o),
		Args:              cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			info, err := kindNamed(kind)
			if err != nil {
				return err
			}
			ns, err := o.namespace()
			if err != nil {
				return err
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			w, err := Explain(cmd.Context(), c, workspace.New(workspace.Reconciler{}, info), ns, args[0], o.Now())
			if err != nil {
				return err
			}
			return w.Print(o.Out)
		},
	}
	cmd.Flags().StringVar(&kind, "kind", kind, "The kind of TARGET: cluster, machine or machinepool.")
	cmdutil.CheckErr(cmd.RegisterFlagCompletionFunc("kind", CompleteKinds))
	return cmd
}

// Why is an explanation: the facts gathered and the decision made from them.
type Why struct {
	Kind      jobs.Kind
	Namespace string
	Name      string
	// Paused is set when the controller starts nothing because the object is paused: it carries
	// the cluster.x-k8s.io/paused annotation, or the Cluster API Cluster named by its
	// cluster-name label has spec.paused (workspace.PauseOf reads both); PausedBy says which.
	Paused   bool
	PausedBy string
	// Suspended is set when the pause is the object's own annotation, which `kubectl captf
	// suspend` writes and `resume` removes.
	Suspended bool
	// Dependents describes the machines and pools a deleted cluster waits for.
	Dependents string
	// Dependencies are what Cluster API provides for a run: owner, cluster, bootstrap data.
	Dependencies workspace.Dependencies
	// Credentials are what the object's identity lends its runs.
	Credentials workspace.Credentials
	// StateSuffix names the state Secret and its lock Lease.
	StateSuffix string
	// RenderErr is why the inputs could not be rendered.
	RenderErr error
	Input     decide.Input
	Decision  decide.Decision
}

// Explain gathers the facts the controller passes to decide.Decide, read-only, and decides.
func Explain(ctx context.Context, c client.Client, r *workspace.Reconciler, ns, name string, now time.Time) (*Why, error) {
	obj := r.KindInfo.New()
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%s %q not found in namespace %s", r.Kind, name, ns)
		}
		return nil, fmt.Errorf("reading %s %s: %w", r.Kind, name, err)
	}
	all, err := r.OwnJobs(ctx, c, obj)
	if err != nil {
		return nil, err
	}
	// The controller's own fact gathering: what it would decide now is what is explained.
	facts, err := r.GatherFacts(ctx, c, obj, all, now)
	if err != nil {
		return nil, err
	}
	in := facts.Input
	suffix := jobs.StateSecretSuffix(ns, r.Kind, name)
	pause, err := workspace.PauseOf(ctx, c, obj)
	if apierrors.IsForbidden(err) {
		// Reading the Cluster is optional here: without the right, the pause is not shown.
		pause, err = workspace.Pause{}, nil
	}
	if err != nil {
		return nil, err
	}
	_, suspended := obj.GetAnnotations()[workspace.PausedAnnotation]
	return &Why{Kind: r.Kind, Namespace: ns, Name: name, Paused: pause.Paused, PausedBy: pause.Why, Suspended: suspended, Dependents: facts.Dependents, Dependencies: facts.Dependencies, Credentials: facts.Credentials, StateSuffix: suffix, RenderErr: facts.RenderErr, Input: in, Decision: decide.Decide(in)}, nil
}

// reasons explains the decision's reasons in words.
var reasons = map[string]string{
	decide.JobActive:              "a run of this object is still running; nothing else starts until it ends",
	decide.DeletionHeld:           "the object is being deleted but its state cannot be read, so destroy is held (fix or restore the state Secret)",
	decide.DeletingWithoutState:   "the object is being deleted and its state holds no resources: the finalizer is dropped",
	decide.Deleting:               "the object is being deleted: destroy its resources",
	decide.StateUnreadable:        "the state Secret cannot be read; nothing runs until it can (see the StateReadable condition)",
	decide.StateLost:              "the state Secret is missing although an apply once succeeded: nothing is applied (restore a backup with captf.io/restore-state, or delete the durable inputs Secret to start over)",
	decide.NoState:                "there is no state yet: provision",
	decide.StateWithoutInputsHash: "the state records no inputs hash: apply to record one",
	decide.InputsChanged:          "the rendered inputs differ from those of the last successful apply",
	decide.LastApplyFailed:        "the last apply failed: apply again",
	decide.InputsUnavailable:      "an apply is due but the inputs cannot be rendered (see the spec's source and variables)",
	decide.RefreshAfterApply:      "a refresh follows a successful apply",
	decide.DriftDue:               "the drift check interval has passed",
	decide.MembershipRefresh:      "the pool's membership refresh interval has passed: its members are read again",
	decide.HealthCheckDue:         "the machine's health check interval has passed (spec.remediation): its health is read again",
	decide.UpToDate:               "the state matches the current inputs and nothing is due",
	decide.DriftRemediation:       "the last drift check found drift and the drift action is Remediate",
	decide.RestoreRequested:       "a state restore is requested (captf.io/restore-state)",
	decide.PlanAwaitingApproval:   "the plan waits for a person's approval (kubectl captf approve)",
	decide.DestructivePlanBlocked: "the last apply of these inputs stopped before a destructive plan; approve it (kubectl captf approve) or change the inputs",
	decide.Abandoned:              "the object is being deleted and captf.io/abandon-infrastructure names its UID: no destroy runs, the finalizer is dropped and the infrastructure is left as it is",
	decide.WaitingForDependents:   "the cluster is being deleted and its machines and pools are deleted first",
	decide.IdentityNotAllowed:     "the object's TerraformClusterIdentity lends its namespace no credentials, so no run starts, a destroy included (see IdentityAllowed)",
	decide.ReplanRequested:        "a fresh plan was requested (captf.io/replan, kubectl captf replan) and no plan Job started since serves it",
	decide.DependenciesNotReady:   "a run needs what Cluster API provides (the owner that names this object back, the cluster's infrastructure and exports, the bootstrap data), and it is not all there",
}

// Print writes the explanation.
func (w *Why) Print(out io.Writer) error {
	var b strings.Builder
	in, d := w.Input, w.Decision
	fmt.Fprintf(&b, "%s %s/%s\n", w.Kind, w.Namespace, w.Name)
	switch {
	case w.Suspended:
		fmt.Fprintf(&b, "Paused:   suspended by annotation %s, resume with `kubectl captf resume %s`; the controller starts nothing; once resumed:\n", workspace.PausedAnnotation, w.Name)
	case w.Paused:
		fmt.Fprintf(&b, "Paused:   %s, so the controller starts nothing; once the pause ends:\n", Printable(w.PausedBy))
	}
	reason, held := strings.CutSuffix(d.Reason, decide.BackoffSuffix)
	switch {
	case d.DropFinalizer:
		fmt.Fprintf(&b, "Decision: drop the finalizer (%s)\n", d.Reason)
	case d.Op != "":
		fmt.Fprintf(&b, "Decision: start %s now (%s)\n", d.Op, d.Reason)
	case held:
		fmt.Fprintf(&b, "Decision: wait for the backoff window (%s)\n", d.Reason)
	default:
		fmt.Fprintf(&b, "Decision: start nothing (%s)\n", d.Reason)
	}
	if text, ok := reasons[reason]; ok {
		fmt.Fprintf(&b, "Why:      %s\n", text)
	}
	if w.Dependents != "" {
		fmt.Fprintf(&b, "Waits for: %s\n", Printable(w.Dependents))
	}
	if deps := w.Dependencies; deps.Status != "" && !deps.Ready() {
		fmt.Fprintf(&b, "Waits for: %s: %s\n", Printable(deps.Reason), Printable(deps.Message))
	}
	if creds := w.Credentials; !creds.Allowed() {
		fmt.Fprintf(&b, "Waits for: %s: %s\n", Printable(creds.Reason), Printable(creds.Message))
	}
	if d.Backoff != nil {
		fmt.Fprintf(&b, "Backoff:  %d counted failure(s), delay %s, retry %s (%s)\n", d.Backoff.Failures, d.Backoff.Delay,
			Until(d.Backoff.RetryAfter, in.Now), d.Backoff.RetryAfter.UTC().Format(time.RFC3339))
		fmt.Fprintf(&b, "          a backoff cannot be skipped: it ends at retryAfter, or when the operation succeeds\n")
	}
	if d.Op == "" && d.RequeueAfter > 0 {
		fmt.Fprintf(&b, "Next look: %s at the latest, or on any change\n", Until(in.Now.Add(d.RequeueAfter), in.Now))
	}
	w.writeFacts(&b)
	_, err := io.WriteString(out, b.String())
	return err
}

// writeFacts writes the facts the decision was made from.
func (w *Why) writeFacts(b *strings.Builder) {
	in := w.Input
	fmt.Fprintf(b, "Facts:\n")
	fmt.Fprintf(b, "  inputs hash:      %s\n", Printable(orNone(in.CurrentInputsHash)))
	if w.RenderErr != nil {
		fmt.Fprintf(b, "  inputs error:     %s\n", Printable(w.RenderErr.Error()))
	}
	switch {
	case in.StateErr != nil:
		fmt.Fprintf(b, "  state:            unreadable: %s\n", Printable(in.StateErr.Error()))
	case !in.State.Exists:
		fmt.Fprintf(b, "  state:            none\n")
	default:
		fmt.Fprintf(b, "  state:            serial %d, %d resource(s), applied inputs %s\n", in.State.Serial, in.State.Resources, Printable(orNone(in.State.InputsHash)))
	}
	fmt.Fprintf(b, "  state Secret:     %s (lock Lease %s)\n", state.SecretName(w.StateSuffix), state.LockLeaseName(w.StateSuffix))
	fmt.Fprintf(b, "  retained jobs:    %d\n", len(in.Jobs))
	if in.Manual {
		plan := None
		if in.Plan != nil {
			plan = Printable(fmt.Sprintf("%s (inputs %s)", in.Plan.PlanHash, in.Plan.InputsHash))
		}
		fmt.Fprintf(b, "  apply policy:     Manual; current plan %s; approved %s\n", plan, Printable(orNone(in.ApprovedPlan)))
	}
	if in.InterruptedApply != "" {
		fmt.Fprintf(b, "  interrupted:      apply Job %s disappeared while it ran\n", Printable(in.InterruptedApply))
	}
	if !in.Mutable {
		fmt.Fprintf(b, "  mutable:          no (a provisioned machine's inputs are not applied again)\n")
	}
	var windows []string
	for _, op := range jobs.Ops() {
		if win, active := jobs.Backoff(in.Jobs, op, in.Limits, in.Now); win.Failures > 0 {
			state := "passed"
			if active {
				state = "open, retry " + Until(win.RetryAfter, in.Now)
			}
			windows = append(windows, fmt.Sprintf("%s: %d failure(s), delay %s, %s", op, win.Failures, win.Delay, state))
		}
	}
	if len(windows) > 0 {
		fmt.Fprintf(b, "  backoff windows:  %s\n", strings.Join(windows, "; "))
	}
}

package app

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	runsv1alpha1 "github.com/captf/captf/apis/runs/v1alpha1"
)

// patchObjectsRights opens the "Rights needed:" paragraph of the verbs that annotate an object.
const patchObjectsRights = "Rights needed: get and patch on terraformclusters, terraformmachines and\n" +
	"terraformmachinepools (infrastructure.cluster.x-k8s.io), granted by ClusterRole " + RoleOperator

// kindNames lists the --kind values: "cluster, machine or machinepool".
func kindNames() string {
	var names []string
	for _, k := range infrav1.Kinds {
		names = append(names, k.Name)
	}
	last := len(names) - 1
	return strings.Join(names[:last], ", ") + " or " + names[last]
}

// target is one captf object a verb acts on.
type target struct {
	Kind infrav1.KindInfo
	Obj  infrav1.Workspace
}

// String is Kind/name, as the runs table shows targets, Printable.
func (t target) String() string { return Printable(t.Kind.Kind + "/" + t.Obj.GetName()) }

// lookupTarget connects with the user's flags and reads the object of that name in the
// namespace of -n (see findTarget).
func (o *Options) lookupTarget(ctx context.Context, name, kind string) (client.Client, target, error) {
	ns, err := o.namespace()
	if err != nil {
		return nil, target{}, err
	}
	c, err := o.client()
	if err != nil {
		return nil, target{}, err
	}
	t, err := findTarget(ctx, c, ns, name, kind)
	return c, t, err
}

// findTarget reads the object of that name: of the kind --kind names, or else the one object of
// that name among the captf kinds. Several objects of the name are an error that lists their
// kinds, so a verb never acts on a guess.
func findTarget(ctx context.Context, c client.Client, ns, name, kind string) (target, error) {
	kinds := infrav1.Kinds
	if kind != "" {
		info, err := kindNamed(kind)
		if err != nil {
			return target{}, err
		}
		kinds = []infrav1.KindInfo{info}
	}
	var found []target
	for _, info := range kinds {
		obj := info.New()
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case apierrors.IsForbidden(err):
			return target{}, fmt.Errorf("reading %s %s: %w (bind ClusterRole %s in namespace %s for get on the captf kinds)", info.Kind, name, err, RoleOperator, ns)
		case err != nil:
			return target{}, fmt.Errorf("reading %s %s: %w", info.Kind, name, err)
		}
		found = append(found, target{Kind: info, Obj: obj})
	}
	switch len(found) {
	case 0:
		if kind != "" {
			return target{}, fmt.Errorf("%s %q not found in namespace %s", kinds[0].Kind, name, ns)
		}
		return target{}, fmt.Errorf("no TerraformCluster, TerraformMachine or TerraformMachinePool named %q in namespace %s", name, ns)
	case 1:
		return found[0], nil
	}
	var which []string
	for _, t := range found {
		which = append(which, t.Kind.Kind)
	}
	var flags []string
	for _, t := range found {
		flags = append(flags, t.Kind.Name)
	}
	return target{}, fmt.Errorf("%q names a %s in namespace %s: pick one with --kind=%s", name, strings.Join(which, " and a "), ns, strings.Join(flags, "|"))
}

// addKindFlag adds --kind, which picks the kind when a name is ambiguous.
func addKindFlag(cmd *cobra.Command, kind *string) {
	cmd.Flags().StringVar(kind, "kind", "", "The kind of TARGET when several captf objects have its name: "+kindNames()+".")
	cmdutil.CheckErr(cmd.RegisterFlagCompletionFunc("kind", CompleteKinds))
}

// setAnnotation sets an annotation of the target by a merge patch (value nil removes it): only
// that key is written, whatever else changed on the object since it was read.
func setAnnotation(ctx context.Context, c client.Client, t target, key string, value *string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]*string{key: value}}})
	if err != nil {
		return fmt.Errorf("encoding the patch: %w", err)
	}
	if err := c.Patch(ctx, t.Obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
		if apierrors.IsForbidden(err) {
			return fmt.Errorf("annotating %s: %w (bind ClusterRole %s for patch on the captf kinds)", t, err, RoleOperator)
		}
		return fmt.Errorf("annotating %s: %w", t, err)
	}
	return nil
}

// openBackoffs lists the runs of the target whose backoff window is still open at the time the
// runs API read them: the newest counted failure of each operation that carries a window.
func (o *Options) openBackoffs(ctx context.Context, c client.Client, t target) ([]runsv1alpha1.Run, error) {
	var runs runsv1alpha1.RunList
	err := c.List(ctx, &runs, client.InNamespace(t.Obj.GetNamespace()),
		client.MatchingFields{"spec.target.name": t.Obj.GetName(), "spec.target.kind": t.Kind.Kind})
	if err != nil {
		return nil, err
	}
	var open []runsv1alpha1.Run
	for _, r := range runs.Items {
		if b := r.Status.Backoff; b != nil && b.Active {
			open = append(open, r)
		}
	}
	SortOldestFirst(open)
	return open, nil
}

// writeBackoffs says which backoff windows stay open, and that the verb does not skip them.
func (o *Options) writeBackoffs(ctx context.Context, c client.Client, t target, verb string) error {
	open, err := o.openBackoffs(ctx, c, t)
	if apierrors.IsForbidden(err) {
		_, err = fmt.Fprintf(o.Out, "Backoff windows are not shown: reading them needs list on runs.runs.captf.io (ClusterRole %s).\n", RoleRunsView)
		return err
	}
	if err != nil {
		return fmt.Errorf("listing the runs of %s for open backoff windows: %w", t, err)
	}
	now := o.Now()
	for _, r := range open {
		b := r.Status.Backoff
		op := Printable(r.Spec.Operation)
		fmt.Fprintf(o.Out, "A backoff window of %s stays open until %s (%s) after %d counted failure(s), the newest %s: %s does not skip it; no %s starts before then.\n",
			op, b.RetryAfter.UTC().Format("2006-01-02T15:04:05Z"), Until(b.RetryAfter.Time, now), b.Failures, Printable(r.Name), verb, op)
	}
	return nil
}

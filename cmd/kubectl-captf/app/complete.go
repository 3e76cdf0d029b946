package app

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	runsv1alpha1 "github.com/captf/captf/apis/runs/v1alpha1"
)

// Shell completion: kubectl (1.26 and later) runs kubectl_complete-captf, which asks
// `kubectl captf __complete`; cobra parses the flags typed so far, so the names come from the
// cluster and namespace of the user's --kubeconfig, --context and -n, read with their rights.

// CompleteTargets completes a command's first argument with the names of the captf objects
// (TerraformClusters, TerraformMachines, TerraformMachinePools) of the namespace; when the
// command has a --kind flag with a value, only the objects of that kind.
func CompleteTargets(o *Options) cobra.CompletionFunc {
	return firstArg(o, func(ctx context.Context, cmd *cobra.Command, c client.Client, ns string) ([]string, error) {
		kinds := infrav1.Kinds
		if f := cmd.Flags().Lookup("kind"); f != nil && f.Value.String() != "" {
			info, err := kindNamed(f.Value.String())
			if err != nil {
				return nil, err
			}
			kinds = []infrav1.KindInfo{info}
		}
		return TargetNames(ctx, c, ns, kinds)
	})
}

// CompleteRuns completes a command's first argument with the names of the namespace's runs.
func CompleteRuns(o *Options) cobra.CompletionFunc {
	return firstArg(o, func(ctx context.Context, _ *cobra.Command, c client.Client, ns string) ([]string, error) {
		var list runsv1alpha1.RunList
		return listNames(ctx, c, &list, client.InNamespace(ns))
	})
}

// CompletePlans completes a command's first argument with the names of the namespace's plans,
// or with phase set, of its plans in that phase (approve offers those awaiting approval).
func CompletePlans(o *Options, phase runsv1alpha1.PlanPhase) cobra.CompletionFunc {
	return firstArg(o, func(ctx context.Context, _ *cobra.Command, c client.Client, ns string) ([]string, error) {
		opts := []client.ListOption{client.InNamespace(ns)}
		if phase != "" {
			opts = append(opts, client.MatchingFields{"status.phase": string(phase)})
		}
		var list runsv1alpha1.PlanList
		return listNames(ctx, c, &list, opts...)
	})
}

// CompleteKinds completes --kind.
func CompleteKinds(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	var out []cobra.Completion
	for _, k := range infrav1.Kinds {
		if strings.HasPrefix(k.Name, toComplete) {
			out = append(out, cobra.CompletionWithDesc(k.Name, k.Kind))
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// TargetNames lists the names of the objects of kinds in ns, sorted, each once.
func TargetNames(ctx context.Context, c client.Client, ns string, kinds []infrav1.KindInfo) ([]string, error) {
	var out []string
	for _, k := range kinds {
		got, err := listNames(ctx, c, k.NewList(), client.InNamespace(ns))
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// firstArg completes the first argument with the names list returns that start with what was
// typed, and nothing after it. A failure offers nothing: completion has no place for errors,
// which cobra writes to its debug log (BASH_COMP_DEBUG_FILE).
func firstArg(o *Options, list func(context.Context, *cobra.Command, client.Client, string) ([]string, error)) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		all, err := func() ([]string, error) {
			ns, err := o.namespace()
			if err != nil {
				return nil, err
			}
			c, err := o.client()
			if err != nil {
				return nil, err
			}
			return list(cmd.Context(), cmd, c, ns)
		}()
		if err != nil {
			cobra.CompDebugln(fmt.Sprintf("completing %s: %v", cmd.CommandPath(), err), true)
			return nil, cobra.ShellCompDirectiveError
		}
		var out []cobra.Completion
		for _, name := range all {
			if strings.HasPrefix(name, toComplete) {
				out = append(out, name)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// listNames lists list's items and returns their names in the server's order.
func listNames(ctx context.Context, c client.Client, list client.ObjectList, opts ...client.ListOption) ([]string, error) {
	if err := c.List(ctx, list, opts...); err != nil {
		return nil, fmt.Errorf("listing %T: %w", list, err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(items))
	for _, item := range items {
		m, err := meta.Accessor(item)
		if err != nil {
			return nil, err
		}
		out = append(out, m.GetName())
	}
	return out, nil
}

package app

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
)

func TestTargetNames(t *testing.T) {
	cluster := func(ns, name string) *infrav1.TerraformCluster {
		return &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	machine := func(ns, name string) *infrav1.TerraformMachine {
		return &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	c := fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(
		cluster("dev", "web"), cluster("dev", "db"), cluster("prod", "web-prod"), machine("dev", "web-md-0"), machine("dev", "web"),
	).Build()
	for _, tc := range []struct {
		name  string
		kinds []infrav1.KindInfo
		want  []string
	}{
		{name: "every kind of the namespace, sorted, each name once", kinds: infrav1.Kinds, want: []string{"db", "web", "web-md-0"}},
		{name: "only the kind asked for", kinds: []infrav1.KindInfo{infrav1.MachineKind}, want: []string{"web", "web-md-0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := TargetNames(context.Background(), c, "dev", tc.kinds)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("TargetNames = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCompleteKinds(t *testing.T) {
	got, directive := CompleteKinds(nil, nil, "machine")
	if directive != cobra.ShellCompDirectiveNoFileComp || !slices.Equal(got, []string{"machine\tTerraformMachine", "machinepool\tTerraformMachinePool"}) {
		t.Errorf("CompleteKinds(machine) = %v, %v", got, directive)
	}
}

func TestTargetSelector(t *testing.T) {
	for _, tc := range []struct {
		name, target, kind, extra string
		want, wantErr             string
	}{
		{name: "nothing selects everything"},
		{name: "a target selects by name", target: "web", want: "spec.target.name=web"},
		{name: "a kind selects by kind", target: "web", kind: "machinepool", want: "spec.target.name=web,spec.target.kind=TerraformMachinePool"},
		{name: "--field-selector is kept", target: "web", extra: "status.phase!=Succeeded", want: "status.phase!=Succeeded,spec.target.name=web"},
		{name: "an unknown kind is refused", kind: "pod", wantErr: `unknown --kind "pod": cluster, machine or machinepool`},
		{name: "a malformed selector is refused", extra: "status.phase", wantErr: `invalid --field-selector "status.phase"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := targetSelector(tc.target, tc.kind, tc.extra)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("targetSelector = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

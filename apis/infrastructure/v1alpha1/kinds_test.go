package v1alpha1

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

func TestEveryKindRowIsComplete(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, k := range Kinds {
		for _, field := range []string{k.Kind, k.Short, k.Resource, k.Name} {
			if field == "" || seen[field] {
				t.Fatalf("kind %+v: empty or repeated field %q", k, field)
			}
			seen[field] = true
		}
		gvks, _, err := scheme.ObjectKinds(k.New())
		if err != nil || gvks[0].Kind != k.Kind {
			t.Fatalf("%s: New returns %v (%v)", k.Kind, gvks, err)
		}
		if gvks, _, err := scheme.ObjectKinds(k.NewList()); err != nil || gvks[0].Kind != k.Kind+"List" {
			t.Fatalf("%s: NewList returns %v (%v)", k.Kind, gvks, err)
		}
		if got, ok := KindInfoOf(k.Kind); !ok || got.Short != k.Short {
			t.Fatalf("KindInfoOf(%s) = %+v, %v", k.Kind, got, ok)
		}
		if k.InputsMutable == nil {
			t.Fatalf("%s: no InputsMutable", k.Kind)
		}
	}
	if ClusterKind.Finalizer() != "terraformcluster.infrastructure.cluster.x-k8s.io" {
		t.Fatalf("finalizer = %s", ClusterKind.Finalizer())
	}
}

func TestKindRules(t *testing.T) {
	remediate := DriftSpec{IntervalSeconds: ptr.To[int64](60), Action: DriftActionRemediate}
	provisioned := &TerraformMachine{Spec: TerraformMachineSpec{Drift: MachineDriftSpec{IntervalSeconds: ptr.To[int64](60)}}}
	provisioned.Status.Initialization = &Initialization{Provisioned: ptr.To(true)}
	for _, tc := range []struct {
		rule        string
		kind        KindInfo
		obj         Workspace
		mutable     bool
		driftAction DriftAction
	}{
		{"a cluster's inputs are applied again and its drift may be remediated", ClusterKind,
			&TerraformCluster{Spec: TerraformClusterSpec{Drift: remediate}}, true, DriftActionRemediate},
		{"a pool's inputs are applied again and its drift may be remediated", MachinePoolKind,
			&TerraformMachinePool{Spec: TerraformMachinePoolSpec{Drift: remediate}}, true, DriftActionRemediate},
		{"a machine not yet provisioned takes changed inputs", MachineKind,
			&TerraformMachine{}, true, DriftActionReport},
		{"a provisioned machine's inputs are fixed and its drift is only reported", MachineKind,
			provisioned, false, DriftActionReport},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			if got := tc.kind.InputsMutable(tc.obj); got != tc.mutable {
				t.Errorf("InputsMutable = %v, want %v", got, tc.mutable)
			}
			policy := tc.kind.DriftPolicy(tc.obj)
			if policy.Action != tc.driftAction || ptr.Deref(policy.IntervalSeconds, 0) != ptr.Deref(tc.obj.Drift().IntervalSeconds, 0) {
				t.Errorf("DriftPolicy = %+v, want action %s and the spec's interval", policy, tc.driftAction)
			}
		})
	}
}

func TestEveryKindHasATemplateKind(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	for _, k := range Kinds {
		tmpl := k.Template
		if tmpl.Kind != k.Kind+"Template" || tmpl.Resource != strings.ToLower(tmpl.Kind)+"s" || tmpl.New == nil {
			t.Fatalf("%s: template row %+v", k.Kind, tmpl)
		}
		if gvks, _, err := scheme.ObjectKinds(tmpl.New()); err != nil || gvks[0].Kind != tmpl.Kind {
			t.Fatalf("%s: New returns %v (%v)", tmpl.Kind, gvks, err)
		}
	}
}

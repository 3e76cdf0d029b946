package jobs

import (
	"maps"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestLabelValue(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"a value of 63 characters is kept", strings.Repeat("x", 63), strings.Repeat("x", 63)},
		{"a value of 64 characters becomes the first 16 hex of its SHA-256", strings.Repeat("x", 64), "7ce100971f64e700"},
		{"an empty value is kept", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := LabelValue(tt.in)
			if got != tt.want {
				t.Errorf("LabelValue() = %q, want %q", got, tt.want)
			}
			if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
				t.Errorf("LabelValue() = %q is not a label value: %v", got, errs)
			}
		})
	}
}

func TestLabels(t *testing.T) {
	long := strings.Repeat("c", 70)
	tests := []struct {
		name        string
		kind        Kind
		obj         string
		clusterName string
		op          Op
		attempt     int32
		want        map[string]string
	}{
		{
			name: "a Job carries managed, owner kind and name, cluster name, op and attempt",
			kind: KindCluster, obj: "web", clusterName: "prod", op: OpApply, attempt: 3,
			want: map[string]string{
				"captf.io/managed": "true",
				"captf.infrastructure.cluster.x-k8s.io/owner-kind": "TerraformCluster",
				"captf.infrastructure.cluster.x-k8s.io/owner-name": "web",
				"cluster.x-k8s.io/cluster-name":                    "prod",
				"captf.infrastructure.cluster.x-k8s.io/op":         "apply",
				"captf.infrastructure.cluster.x-k8s.io/attempt":    "3",
			},
		},
		{
			name: "owner and cluster names past 63 characters are hashed",
			kind: KindMachine, obj: long, clusterName: long, op: OpDrift, attempt: 40,
			want: map[string]string{
				LabelManaged:     "true",
				LabelOwnerKind:   "TerraformMachine",
				LabelOwnerName:   hash16(long),
				LabelClusterName: hash16(long),
				LabelOp:          "drift",
				LabelAttempt:     "40",
			},
		},
		{
			name: "an object without a cluster name has no cluster-name label",
			kind: KindMachinePool, obj: "pool", op: OpRefresh, attempt: 1,
			want: map[string]string{
				LabelManaged:   "true",
				LabelOwnerKind: "TerraformMachinePool",
				LabelOwnerName: "pool",
				LabelOp:        "refresh",
				LabelAttempt:   "1",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Labels(tt.kind, tt.obj, tt.clusterName, tt.op, tt.attempt)
			if !maps.Equal(got, tt.want) {
				t.Errorf("Labels() = %v, want %v", got, tt.want)
			}
			for k, v := range got {
				if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
					t.Errorf("label %s=%q: %v", k, v, errs)
				}
			}
		})
	}
}

func TestOwnerLabels(t *testing.T) {
	want := map[string]string{LabelManaged: "true", LabelOwnerKind: "TerraformMachine", LabelOwnerName: "m0"}
	if got := OwnerLabels(KindMachine, "m0"); !maps.Equal(got, want) {
		t.Errorf("OwnerLabels() = %v, want %v", got, want)
	}
}

func TestHasMark(t *testing.T) {
	tests := []struct {
		name string
		ann  map[string]string
		want bool
	}{
		{"a mark is set by its presence", map[string]string{AnnotationInterrupted: ""}, true},
		{"a mark set to true is set", map[string]string{AnnotationInterrupted: "true"}, true},
		{"a mark set to false reads as unset", map[string]string{AnnotationInterrupted: "false"}, false},
		{"a missing mark is unset", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := hasMark(tt.ann, AnnotationInterrupted); got != tt.want {
				t.Errorf("hasMark() = %v, want %v", got, tt.want)
			}
		})
	}
}

package v1alpha1

import (
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// KindInfo describes one kind that runs Jobs. The controller, the runs API and the plugin all
// read the kinds from Kinds, so adding a kind is one row there.
// +kubebuilder:object:generate=false
type KindInfo struct {
	// Kind is the API kind, e.g. TerraformCluster.
	Kind string
	// Short is the kind's short form in Job and Secret names: c, m, mp.
	Short string
	// Resource is the plural resource name, e.g. terraformclusters.
	Resource string
	// Name is how people name the kind on the command line: cluster, machine, machinepool.
	Name string
	// New returns an empty object of the kind; NewList an empty list.
	New     func() Workspace
	NewList func() client.ObjectList
	// InputsMutable reports whether the object's changed inputs are applied again.
	InputsMutable func(Workspace) bool
	// DriftRemediable is set when the kind's drift may be remediated (spec.drift.action
	// Remediate); otherwise drift is only reported.
	DriftRemediable bool
	// Template is the kind's Template kind, from which Cluster API makes objects of the kind.
	Template TemplateInfo
}

// TemplateInfo describes a Template kind.
// +kubebuilder:object:generate=false
type TemplateInfo struct {
	// Kind is the API kind, e.g. TerraformClusterTemplate.
	Kind string
	// Resource is the plural resource name, e.g. terraformclustertemplates.
	Resource string
	// New returns an empty object of the kind.
	New func() client.Object
}

// Finalizer is the kind's finalizer, e.g. terraformcluster.infrastructure.cluster.x-k8s.io.
func (k KindInfo) Finalizer() string { return strings.ToLower(k.Kind) + "." + GroupVersion.Group }

// DriftPolicy is obj's drift schedule and action under the kind's rules: a kind whose drift is not
// remediable only reports it.
func (k KindInfo) DriftPolicy(obj Workspace) DriftSpec {
	policy := obj.Drift()
	if !k.DriftRemediable {
		policy.Action = DriftActionReport
	}
	return policy
}

// The kinds that run Jobs. A cluster's and a pool's inputs are rendered every pass and applied
// again whenever they change, and their drift may be remediated; a machine is never re-rendered
// once provisioned, and its drift is only reported (a machine is replaced, not repaired).
var (
	ClusterKind = KindInfo{
		Kind: "TerraformCluster", Short: "c", Resource: "terraformclusters", Name: "cluster",
		New:             func() Workspace { return &TerraformCluster{} },
		NewList:         func() client.ObjectList { return &TerraformClusterList{} },
		InputsMutable:   func(Workspace) bool { return true },
		DriftRemediable: true,
		Template: TemplateInfo{Kind: "TerraformClusterTemplate", Resource: "terraformclustertemplates",
			New: func() client.Object { return &TerraformClusterTemplate{} }},
	}
	MachineKind = KindInfo{
		Kind: "TerraformMachine", Short: "m", Resource: "terraformmachines", Name: "machine",
		New:           func() Workspace { return &TerraformMachine{} },
		NewList:       func() client.ObjectList { return &TerraformMachineList{} },
		InputsMutable: func(obj Workspace) bool { return !obj.WorkspaceStatus().IsProvisioned() },
		Template: TemplateInfo{Kind: "TerraformMachineTemplate", Resource: "terraformmachinetemplates",
			New: func() client.Object { return &TerraformMachineTemplate{} }},
	}
	MachinePoolKind = KindInfo{
		Kind: "TerraformMachinePool", Short: "mp", Resource: "terraformmachinepools", Name: "machinepool",
		New:             func() Workspace { return &TerraformMachinePool{} },
		NewList:         func() client.ObjectList { return &TerraformMachinePoolList{} },
		InputsMutable:   func(Workspace) bool { return true },
		DriftRemediable: true,
		Template: TemplateInfo{Kind: "TerraformMachinePoolTemplate", Resource: "terraformmachinepooltemplates",
			New: func() client.Object { return &TerraformMachinePoolTemplate{} }},
	}

	// Kinds are every kind that runs Jobs.
	Kinds = []KindInfo{ClusterKind, MachineKind, MachinePoolKind}
)

// KindInfoOf returns the row of a kind by its API kind, e.g. TerraformCluster.
func KindInfoOf(kind string) (KindInfo, bool) {
	for _, k := range Kinds {
		if k.Kind == kind {
			return k, true
		}
	}
	return KindInfo{}, false
}

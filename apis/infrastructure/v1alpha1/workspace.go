package v1alpha1

import "sigs.k8s.io/controller-runtime/pkg/client"

// Workspace is what the three kinds share: an object whose spec embeds WorkspaceSpec and whose
// status embeds WorkspaceStatus. The controller's kind-agnostic engine works on it.
// +kubebuilder:object:generate=false
type Workspace interface {
	client.Object
	// WorkspaceSpec returns the shared part of the spec.
	WorkspaceSpec() *WorkspaceSpec
	// WorkspaceStatus returns the shared part of the status, for writing.
	WorkspaceStatus() *WorkspaceStatus
	// Drift returns spec.drift as written; KindInfo.DriftPolicy applies the kind's rules to it.
	Drift() DriftSpec
}

// WorkspaceSpec returns the shared part of the spec.
func (c *TerraformCluster) WorkspaceSpec() *WorkspaceSpec { return &c.Spec.WorkspaceSpec }

// WorkspaceStatus returns the shared part of the status.
func (c *TerraformCluster) WorkspaceStatus() *WorkspaceStatus { return &c.Status.WorkspaceStatus }

// Drift returns spec.drift.
func (c *TerraformCluster) Drift() DriftSpec { return c.Spec.Drift }

// WorkspaceSpec returns the shared part of the spec.
func (m *TerraformMachine) WorkspaceSpec() *WorkspaceSpec { return &m.Spec.WorkspaceSpec }

// WorkspaceStatus returns the shared part of the status.
func (m *TerraformMachine) WorkspaceStatus() *WorkspaceStatus { return &m.Status.WorkspaceStatus }

// Drift returns spec.drift: a schedule without an action.
func (m *TerraformMachine) Drift() DriftSpec {
	return DriftSpec{IntervalSeconds: m.Spec.Drift.IntervalSeconds}
}

// WorkspaceSpec returns the shared part of the spec.
func (p *TerraformMachinePool) WorkspaceSpec() *WorkspaceSpec { return &p.Spec.WorkspaceSpec }

// WorkspaceStatus returns the shared part of the status.
func (p *TerraformMachinePool) WorkspaceStatus() *WorkspaceStatus { return &p.Status.WorkspaceStatus }

// Drift returns spec.drift.
func (p *TerraformMachinePool) Drift() DriftSpec { return p.Spec.Drift }

// Planned is a Workspace whose applies can go through an approved plan: a TerraformCluster.
// +kubebuilder:object:generate=false
type Planned interface {
	Workspace
	// ManualApply reports whether applyPolicy is Manual.
	ManualApply() bool
	// PlanPreview returns the plan waiting for approval, for reading and writing.
	PlanPreview() **PlanPreview
}

// ManualApply reports whether applyPolicy is Manual.
func (c *TerraformCluster) ManualApply() bool { return c.Spec.ApplyPolicy == ApplyPolicyManual }

// PlanPreview returns status.plan.
func (c *TerraformCluster) PlanPreview() **PlanPreview { return &c.Status.Plan }

// IsProvisioned reports status.initialization.provisioned: true once the object's outputs met
// the contract, and for good.
func (s *WorkspaceStatus) IsProvisioned() bool {
	return s.Initialization != nil && s.Initialization.Provisioned != nil && *s.Initialization.Provisioned
}

// Package terraformmachinepool reconciles TerraformMachinePool: the infrastructure of a Cluster
// API machine pool. Everything in its spec is mutable and applied again on change.
package terraformmachinepool

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
)

// New returns the TerraformMachinePool reconciler built on the shared engine base.
func New(base workspace.Reconciler) *workspace.Reconciler {
	base.Kind = jobs.KindMachinePool
	base.NewObject = func() infrav1.Workspace { return &infrav1.TerraformMachinePool{} }
	base.NewList = func() client.ObjectList { return &infrav1.TerraformMachinePoolList{} }
	base.Mutable = func(infrav1.Workspace) bool { return true }
	return &base
}

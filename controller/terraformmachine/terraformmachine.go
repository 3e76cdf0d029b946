// Package terraformmachine reconciles TerraformMachine: the infrastructure of one Cluster API
// machine. A machine is never re-rendered once provisioned: changed inputs are not applied, a
// failed first apply is retried through its missing state.
package terraformmachine

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	"k8s.io/utils/ptr"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
)

// New returns the TerraformMachine reconciler built on the shared engine base.
func New(base workspace.Reconciler) *workspace.Reconciler {
	base.Kind = jobs.KindMachine
	base.NewObject = func() infrav1.Workspace { return &infrav1.TerraformMachine{} }
	base.NewList = func() client.ObjectList { return &infrav1.TerraformMachineList{} }
	base.Mutable = func(obj infrav1.Workspace) bool {
		init := obj.WorkspaceStatus().Initialization
		return init == nil || !ptr.Deref(init.Provisioned, false)
	}
	return &base
}

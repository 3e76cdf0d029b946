// Package terraformcluster reconciles TerraformCluster: the infrastructure of a Cluster API
// cluster. Its inputs are rendered every pass and applied again whenever they change.
package terraformcluster

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
)

// New returns the TerraformCluster reconciler built on the shared engine base.
func New(base workspace.Reconciler) *workspace.Reconciler {
	base.Kind = jobs.KindCluster
	base.NewObject = func() infrav1.Workspace { return &infrav1.TerraformCluster{} }
	base.NewList = func() client.ObjectList { return &infrav1.TerraformClusterList{} }
	base.Mutable = func(infrav1.Workspace) bool { return true }
	return &base
}

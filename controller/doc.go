// Package controller holds the reconcilers of TerraformCluster, TerraformMachine and
// TerraformMachinePool, which drive every Terraform operation as one Kubernetes Job.
package controller

// Package controller wires the controller's manager: its scheme and cache options (what the
// cache holds of each kind, slimmed and interned), the Job cache beside it, the run key, the
// gauges computed from the caches, and the reconcilers of package workspace, which drive every
// Terraform operation of TerraformCluster, TerraformMachine and TerraformMachinePool as one
// Kubernetes Job.
package controller

// Package apis holds the API types of captf: the infrastructure.cluster.x-k8s.io/v1alpha1 CRDs
// (TerraformCluster, TerraformMachine, TerraformMachinePool) and the aggregated runs.captf.io API
// (Run, Plan, PlanApproval).
package apis

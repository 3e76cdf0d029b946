// Package v1alpha1 is version v1alpha1 of the runs.captf.io API, served by captf's aggregated
// API server: the read-only runs and plans computed from the retained Jobs of TerraformCluster,
// TerraformMachine and TerraformMachinePool, and the PlanApproval sent to plans/approval.
//
// +k8s:openapi-gen=true
// +k8s:deepcopy-gen=package
// +k8s:conversion-gen=github.com/captf/captf/apis/runs
// +k8s:defaulter-gen=TypeMeta
// +k8s:openapi-model-package=io.captf.runs.v1alpha1
// +groupName=runs.captf.io
package v1alpha1

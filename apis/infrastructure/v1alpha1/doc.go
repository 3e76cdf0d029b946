// Package v1alpha1 holds the infrastructure.cluster.x-k8s.io/v1alpha1 API of captf: the
// TerraformCluster, TerraformMachine and TerraformMachinePool kinds, each of which is provisioned
// by Terraform/OpenTofu runs in Kubernetes Jobs.
//
// +kubebuilder:object:generate=true
// +groupName=infrastructure.cluster.x-k8s.io
package v1alpha1

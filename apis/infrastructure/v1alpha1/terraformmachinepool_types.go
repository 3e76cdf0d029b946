package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TerraformMachinePoolSpec is the desired state of a TerraformMachinePool.
type TerraformMachinePoolSpec struct {
	WorkspaceSpec `json:",inline"`

	// drift schedules drift checks and says what drift leads to.
	// +optional
	Drift DriftSpec `json:"drift,omitempty"`

	// membershipRefreshIntervalSeconds is how often the pool's members are read again with a
	// refresh (apply -refresh-only), so providerIDList follows instances the cloud adds or
	// removes. Default 60; while the list and the replicas disagree, every 30 seconds.
	// +optional
	// +kubebuilder:validation:Minimum=15
	// +kubebuilder:validation:Maximum=86400
	MembershipRefreshIntervalSeconds *int32 `json:"membershipRefreshIntervalSeconds,omitempty"`

	// providerIDList is set from the module's provider_id_list output.
	// +optional
	// +kubebuilder:validation:MaxItems=10000
	// +listType=atomic
	ProviderIDList []string `json:"providerIDList,omitempty"`
	// providerID is set from the module's provider_id output: the pool's group ID, if it has one.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	ProviderID string `json:"providerID,omitempty"`
}

// TerraformMachinePoolStatus is the observed state of a TerraformMachinePool.
type TerraformMachinePoolStatus struct {
	WorkspaceStatus `json:",inline"`

	// replicas is the module's replicas output: the pool's desired capacity. A pointer, so that a
	// pool scaled to zero says 0 rather than nothing.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Replicas *int32 `json:"replicas,omitempty"`
	// ready is true once the pool is provisioned, and stays true: Cluster API's MachinePool
	// controller (v1.14) still reads status.ready rather than status.initialization.provisioned.
	// +optional
	Ready bool `json:"ready,omitempty"`
	// instances are the module's instances output, at most 1000.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1000
	Instances []PoolInstance `json:"instances,omitempty"`
}

// TerraformMachinePool is the infrastructure of a Cluster API machine pool, provisioned by
// Terraform runs.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:metadata:labels="cluster.x-k8s.io/provider=infrastructure-terraform"
// +kubebuilder:resource:path=terraformmachinepools,scope=Namespaced,categories=cluster-api;terraform,shortName=tfmp
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"
// +kubebuilder:printcolumn:name="Provisioned",type=boolean,JSONPath=".status.initialization.provisioned"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=".status.conditions[?(@.type=='Ready')].status"
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=".status.replicas"
// +kubebuilder:printcolumn:name="Job",type=string,JSONPath=".status.activeJob.name",priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type TerraformMachinePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   TerraformMachinePoolSpec   `json:"spec,omitempty"`
	Status TerraformMachinePoolStatus `json:"status,omitempty"`
}

// TerraformMachinePoolList is a list of TerraformMachinePools.
// +kubebuilder:object:root=true
type TerraformMachinePoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TerraformMachinePool `json:"items"`
}

// PoolInstance is one member of a machine pool, as its module reports it.
type PoolInstance struct {
	// providerID of the instance.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	ProviderID string `json:"providerID"`
	// instanceID is the instance's own ID.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	InstanceID string `json:"instanceID,omitempty"`
	// addresses of the instance.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	Addresses []MachineAddress `json:"addresses,omitempty"`
	// failureDomain the instance runs in.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	FailureDomain string `json:"failureDomain,omitempty"`
	// state of the instance: pending, running, degraded, stopped, terminated or unknown.
	// +optional
	// +kubebuilder:validation:Enum=pending;running;degraded;stopped;terminated;unknown
	State string `json:"state,omitempty"`
}

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TerraformMachineSpec is the desired state of a TerraformMachine. The module source and the
// variables are immutable on a TerraformMachine (rules on its spec field, so a template that
// holds a TerraformMachineSpec is not bound by them): a machine is replaced, never re-rendered.
type TerraformMachineSpec struct {
	WorkspaceSpec `json:",inline"`

	// drift schedules drift checks; a machine's drift is only reported.
	// +optional
	Drift MachineDriftSpec `json:"drift,omitempty"`

	// providerID is set from the module's provider_id output.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	ProviderID string `json:"providerID,omitempty"`

	// remediation says when captf asks Cluster API to replace the machine. It may change at
	// any time.
	// +optional
	Remediation MachineRemediationSpec `json:"remediation,omitempty"`
}

// MachineRemediationSpec says when captf asks Cluster API to replace a machine: by annotating
// its Machine with cluster.x-k8s.io/remediate-machine, which a MachineHealthCheck that selects
// the Machine remediates at once. Without it, the machine's Ready condition (mirrored into the
// Machine's InfrastructureReady) is the signal a MachineHealthCheck reads after its timeout.
type MachineRemediationSpec struct {
	// annotateMachine lets captf annotate the Machine once the module reports the machine
	// terminated, or unhealthy, degraded or stopped in unhealthyThreshold health readings in a
	// row. Default false.
	// +optional
	AnnotateMachine bool `json:"annotateMachine,omitempty"`
	// unhealthyThreshold is the number of health readings in a row that must find the machine
	// unhealthy, degraded or stopped. Default 3.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	UnhealthyThreshold *int32 `json:"unhealthyThreshold,omitempty"`
	// healthCheckIntervalSeconds is how often, with annotateMachine, a provisioned machine's
	// health is read again with a refresh. Default 300.
	// +optional
	// +kubebuilder:validation:Minimum=60
	// +kubebuilder:validation:Maximum=86400
	HealthCheckIntervalSeconds *int64 `json:"healthCheckIntervalSeconds,omitempty"`
}

// MachineDriftSpec schedules a machine's drift checks.
type MachineDriftSpec struct {
	// intervalSeconds between drift checks; 0 turns them off. Default 1800.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=604800
	IntervalSeconds *int64 `json:"intervalSeconds,omitempty"`
}

// TerraformMachineStatus is the observed state of a TerraformMachine.
type TerraformMachineStatus struct {
	WorkspaceStatus `json:",inline"`

	// addresses are the module's addresses output, sorted by type (InternalIP, InternalDNS,
	// ExternalIP, ExternalDNS, Hostname), then address.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	Addresses []MachineAddress `json:"addresses,omitempty"`
	// failureDomain is the module's failure_domain output.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	FailureDomain string `json:"failureDomain,omitempty"`
	// interruptible is the module's interruptible output: the machine may be taken away at any
	// time (a spot instance).
	// +optional
	Interruptible bool `json:"interruptible,omitempty"`
	// unhealthySamples counts the health readings in a row, one per successful apply or refresh
	// after provisioning, that found the machine unhealthy, degraded or stopped; a healthy
	// reading resets it.
	// +optional
	UnhealthySamples int32 `json:"unhealthySamples,omitempty"`
	// lastHealthSample names the Job whose health reading was counted last.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	LastHealthSample string `json:"lastHealthSample,omitempty"`
}

// MachineAddress is one address of a machine, as Cluster API reads it.
type MachineAddress struct {
	// type of the address.
	// +kubebuilder:validation:Enum=Hostname;ExternalIP;InternalIP;ExternalDNS;InternalDNS
	Type string `json:"type"`
	// address itself.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Address string `json:"address"`
}

// TerraformMachine is the infrastructure of one Cluster API machine, provisioned by Terraform runs.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:metadata:labels="cluster.x-k8s.io/provider=infrastructure-terraform"
// +kubebuilder:resource:path=terraformmachines,scope=Namespaced,categories=cluster-api;terraform,shortName=tfm
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"
// +kubebuilder:printcolumn:name="Provisioned",type=boolean,JSONPath=".status.initialization.provisioned"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=".status.conditions[?(@.type=='Ready')].status"
// +kubebuilder:printcolumn:name="ProviderID",type=string,JSONPath=".spec.providerID"
// +kubebuilder:printcolumn:name="Job",type=string,JSONPath=".status.activeJob.name",priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type TerraformMachine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +kubebuilder:validation:XValidation:rule="self.source == oldSelf.source",message="source is immutable",fieldPath=".source"
	// +kubebuilder:validation:XValidation:rule="has(self.variables) == has(oldSelf.variables) && (!has(self.variables) || self.variables == oldSelf.variables)",message="variables are immutable",fieldPath=".variables"
	// +kubebuilder:validation:XValidation:rule="has(self.variablesFrom) == has(oldSelf.variablesFrom) && (!has(self.variablesFrom) || self.variablesFrom == oldSelf.variablesFrom)",message="variablesFrom is immutable",fieldPath=".variablesFrom"
	Spec   TerraformMachineSpec   `json:"spec,omitempty"`
	Status TerraformMachineStatus `json:"status,omitempty"`
}

// TerraformMachineList is a list of TerraformMachines.
// +kubebuilder:object:root=true
type TerraformMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TerraformMachine `json:"items"`
}

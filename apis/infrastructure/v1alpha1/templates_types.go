package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TemplateObjectMeta is the metadata Cluster API puts on each object it makes from a template.
type TemplateObjectMeta struct {
	// labels of the objects made from the template.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// annotations of the objects made from the template.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// TerraformClusterTemplateSpec holds the TerraformCluster a ClusterClass makes.
type TerraformClusterTemplateSpec struct {
	// template is the TerraformCluster made from this template.
	Template TerraformClusterTemplateResource `json:"template"`
}

// TerraformClusterTemplateResource is the metadata and spec of the objects made from a template.
type TerraformClusterTemplateResource struct {
	// metadata of the TerraformCluster.
	// +optional
	ObjectMeta TemplateObjectMeta `json:"metadata,omitempty"`
	// spec of the TerraformCluster.
	Spec TerraformClusterSpec `json:"spec"`
}

// TerraformClusterTemplate is a template of TerraformClusters, for a ClusterClass.
// +kubebuilder:object:root=true
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:metadata:labels="cluster.x-k8s.io/provider=infrastructure-terraform"
// +kubebuilder:resource:path=terraformclustertemplates,scope=Namespaced,categories=cluster-api;terraform,shortName=tfct
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=".spec.template.spec.source.image"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type TerraformClusterTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec TerraformClusterTemplateSpec `json:"spec,omitempty"`
}

// TerraformClusterTemplateList is a list of TerraformClusterTemplates.
// +kubebuilder:object:root=true
type TerraformClusterTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TerraformClusterTemplate `json:"items"`
}

// TerraformMachineTemplateSpec holds the TerraformMachine each Machine of a MachineDeployment,
// MachineSet or control plane gets.
type TerraformMachineTemplateSpec struct {
	// template is the TerraformMachine made from this template.
	Template TerraformMachineTemplateResource `json:"template"`
}

// TerraformMachineTemplateResource is the metadata and spec of the objects made from a template.
type TerraformMachineTemplateResource struct {
	// metadata of the TerraformMachine.
	// +optional
	ObjectMeta TemplateObjectMeta `json:"metadata,omitempty"`
	// spec of the TerraformMachine. providerID is not set in a template: each machine gets its
	// own from its module.
	// +kubebuilder:validation:XValidation:rule="!has(self.providerID) || self.providerID == ''",message="providerID is set by each machine's module, not by a template",fieldPath=".providerID"
	Spec TerraformMachineSpec `json:"spec"`
}

// TerraformMachineTemplate is a template of TerraformMachines.
// +kubebuilder:object:root=true
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:metadata:labels="cluster.x-k8s.io/provider=infrastructure-terraform"
// +kubebuilder:resource:path=terraformmachinetemplates,scope=Namespaced,categories=cluster-api;terraform,shortName=tfmt
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=".spec.template.spec.source.image"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type TerraformMachineTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec TerraformMachineTemplateSpec `json:"spec,omitempty"`
}

// TerraformMachineTemplateList is a list of TerraformMachineTemplates.
// +kubebuilder:object:root=true
type TerraformMachineTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TerraformMachineTemplate `json:"items"`
}

// TerraformMachinePoolTemplateSpec holds the TerraformMachinePool a ClusterClass makes.
type TerraformMachinePoolTemplateSpec struct {
	// template is the TerraformMachinePool made from this template.
	Template TerraformMachinePoolTemplateResource `json:"template"`
}

// TerraformMachinePoolTemplateResource is the metadata and spec of the objects made from a
// template.
type TerraformMachinePoolTemplateResource struct {
	// metadata of the TerraformMachinePool.
	// +optional
	ObjectMeta TemplateObjectMeta `json:"metadata,omitempty"`
	// spec of the TerraformMachinePool. providerIDList and providerID are set by the pool's
	// module, not by a template.
	// +kubebuilder:validation:XValidation:rule="!has(self.providerIDList)",message="providerIDList is set by the pool's module, not by a template",fieldPath=".providerIDList"
	// +kubebuilder:validation:XValidation:rule="!has(self.providerID) || self.providerID == ''",message="providerID is set by the pool's module, not by a template",fieldPath=".providerID"
	Spec TerraformMachinePoolSpec `json:"spec"`
}

// TerraformMachinePoolTemplate is a template of TerraformMachinePools, for a ClusterClass.
// +kubebuilder:object:root=true
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:metadata:labels="cluster.x-k8s.io/provider=infrastructure-terraform"
// +kubebuilder:resource:path=terraformmachinepooltemplates,scope=Namespaced,categories=cluster-api;terraform,shortName=tfmpt
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=".spec.template.spec.source.image"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type TerraformMachinePoolTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec TerraformMachinePoolTemplateSpec `json:"spec,omitempty"`
}

// TerraformMachinePoolTemplateList is a list of TerraformMachinePoolTemplates.
// +kubebuilder:object:root=true
type TerraformMachinePoolTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TerraformMachinePoolTemplate `json:"items"`
}

package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ApplyPolicy says whether an apply needs a person's approval of its plan.
// +kubebuilder:validation:Enum=Automatic;Manual
type ApplyPolicy string

const (
	// ApplyPolicyAutomatic applies without approval; destructive plans still wait for one.
	ApplyPolicyAutomatic ApplyPolicy = "Automatic"
	// ApplyPolicyManual plans first and applies only a plan approved by its hash.
	ApplyPolicyManual ApplyPolicy = "Manual"
)

// TerraformClusterSpec is the desired state of a TerraformCluster.
type TerraformClusterSpec struct {
	WorkspaceSpec `json:",inline"`

	// applyPolicy is Automatic (default) or Manual. Under Manual every apply but the first is
	// planned and waits for the plan's approval.
	// +optional
	// +kubebuilder:default=Automatic
	ApplyPolicy ApplyPolicy `json:"applyPolicy,omitempty"`

	// drift schedules drift checks and says what drift leads to.
	// +optional
	Drift DriftSpec `json:"drift,omitempty"`

	// controlPlaneEndpoint is set from the module's control_plane_endpoint output.
	// +optional
	ControlPlaneEndpoint APIEndpoint `json:"controlPlaneEndpoint,omitempty"`
}

// APIEndpoint is a host and port, as in the CAPI contract.
type APIEndpoint struct {
	// host of the endpoint.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Host string `json:"host,omitempty"`
	// port of the endpoint.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
}

// TerraformClusterStatus is the observed state of a TerraformCluster.
type TerraformClusterStatus struct {
	WorkspaceStatus `json:",inline"`

	// plan is the plan that waits for approval under applyPolicy Manual.
	// +optional
	Plan *PlanPreview `json:"plan,omitempty"`

	// failureDomains are the module's failure_domains output, sorted by name.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	FailureDomains []FailureDomain `json:"failureDomains,omitempty"`

	// exports is a copy of the module's exports output, shown when its compact JSON takes at
	// most 65536 bytes. Machines and pools read the exports from the cluster's state, never
	// from here.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	Exports *apiextensionsv1.JSON `json:"exports,omitempty"`
}

// FailureDomain is one failure domain of a cluster, as Cluster API reads it.
type FailureDomain struct {
	// name of the failure domain.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`
	// controlPlane says whether control plane machines may be placed in it.
	// +optional
	ControlPlane *bool `json:"controlPlane,omitempty"`
	// attributes of the failure domain.
	// +optional
	Attributes map[string]string `json:"attributes,omitempty"`
}

// PlanPreview is a plan of the current inputs that waits for approval.
type PlanPreview struct {
	// inputsHash of the inputs the plan was made from.
	InputsHash string `json:"inputsHash"`
	// job that made the plan.
	Job string `json:"job"`
	// planHash is the keyed p3: hash of the plan; approve it with this value.
	PlanHash string `json:"planHash"`
	// add is how many resources the plan creates.
	Add int32 `json:"add"`
	// change is how many resources the plan updates in place.
	Change int32 `json:"change"`
	// destroy is how many resources the plan deletes or replaces.
	Destroy int32 `json:"destroy"`
	// resources are up to 50 planned changes as "<address> (<actions>)".
	// +optional
	// +kubebuilder:validation:MaxItems=50
	// +listType=atomic
	Resources []string `json:"resources,omitempty"`
	// truncated is true when the plan has more changes than resources lists.
	// +optional
	Truncated bool `json:"truncated,omitempty"`
	// createdAt is when the plan Job finished.
	// +optional
	CreatedAt *metav1.Time `json:"createdAt,omitempty"`
}

// TerraformCluster is the infrastructure of a Cluster API cluster, provisioned by Terraform runs.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:metadata:labels="cluster.x-k8s.io/provider=infrastructure-terraform"
// +kubebuilder:resource:path=terraformclusters,scope=Namespaced,categories=cluster-api;terraform,shortName=tfc
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"
// +kubebuilder:printcolumn:name="Provisioned",type=boolean,JSONPath=".status.initialization.provisioned"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=".status.conditions[?(@.type=='Ready')].status"
// +kubebuilder:printcolumn:name="Job",type=string,JSONPath=".status.activeJob.name"
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=".spec.applyPolicy",priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type TerraformCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   TerraformClusterSpec   `json:"spec,omitempty"`
	Status TerraformClusterStatus `json:"status,omitempty"`
}

// TerraformClusterList is a list of TerraformClusters.
// +kubebuilder:object:root=true
type TerraformClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TerraformCluster `json:"items"`
}

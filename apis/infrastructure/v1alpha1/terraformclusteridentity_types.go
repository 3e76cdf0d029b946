package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TerraformClusterIdentitySpec names the credentials of an identity and the namespaces whose
// objects may use them.
type TerraformClusterIdentitySpec struct {
	// secretRef names the Secret that holds the credentials. Its keys reach the module's runs as
	// environment variables and as files in /var/run/captf/credentials, through a copy in each
	// using object's namespace; nobody who edits those objects reads the Secret itself.
	// The Secret must be in the namespace the controller runs in (captf-system in the install;
	// --controller-namespace or POD_NAMESPACE): the controller lends no other, so an identity
	// cannot carry a Secret of any namespace into the namespaces it allows. An identity naming
	// another namespace lends nothing: its Ready and the using objects' IdentityAllowed are
	// False with the reason SecretNotInControllerNamespace. The API server does not know the
	// controller's namespace, so this is checked when the Secret is read, not on admission.
	// +required
	SecretRef SecretReference `json:"secretRef"`

	// allowedNamespaces are the namespaces whose objects may use the identity. Unset allows
	// none; an empty selector allows every namespace.
	// +optional
	AllowedNamespaces *AllowedNamespaces `json:"allowedNamespaces,omitempty"`

	// allowedImages are the module images a run that receives these credentials may run. An
	// entry is a repository prefix ("registry.example/modules" allows that repository and every
	// one below it, with any tag or digest), a digest ("sha256:<hex>", any reference pinned to
	// it) or "*" (any image). Unset or empty allows none: a run of another image gets no Job,
	// whoever may edit the objects that use the identity.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=512
	AllowedImages []string `json:"allowedImages,omitempty"`
}

// SecretReference names a Secret in a namespace.
type SecretReference struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// namespace of the Secret: the controller's own (see secretRef).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
}

// AllowedNamespaces are namespaces by name and by label; a namespace either names is allowed.
// +kubebuilder:validation:XValidation:rule="has(self.list) || has(self.selector)",message="name namespaces in list, select them with selector, or leave allowedNamespaces unset to allow none"
type AllowedNamespaces struct {
	// list names namespaces.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MaxLength=63
	List []string `json:"list,omitempty"`

	// selector selects namespaces by their labels; {} selects all.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// TerraformClusterIdentityStatus is the observed state of an identity.
type TerraformClusterIdentityStatus struct {
	// conditions of the identity.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// TerraformClusterIdentity lends credentials to the captf objects of the namespaces it allows.
// Cluster-scoped, so a platform team keeps the credentials out of the tenants' namespaces.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:metadata:labels="cluster.x-k8s.io/provider=infrastructure-terraform"
// +kubebuilder:metadata:labels="clusterctl.cluster.x-k8s.io/move-hierarchy="
// +kubebuilder:resource:path=terraformclusteridentities,scope=Cluster,categories=cluster-api;terraform,shortName=tfci
// +kubebuilder:printcolumn:name="Secret",type=string,JSONPath=".spec.secretRef.name"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type TerraformClusterIdentity struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   TerraformClusterIdentitySpec   `json:"spec,omitempty"`
	Status TerraformClusterIdentityStatus `json:"status,omitempty"`
}

// TerraformClusterIdentityList is a list of TerraformClusterIdentities.
// +kubebuilder:object:root=true
type TerraformClusterIdentityList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TerraformClusterIdentity `json:"items"`
}

// IdentityReference names a TerraformClusterIdentity.
type IdentityReference struct {
	// name of the TerraformClusterIdentity.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of the captf infrastructure kinds.
var GroupVersion = schema.GroupVersion{Group: "infrastructure.cluster.x-k8s.io", Version: "v1alpha1"}

var (
	// SchemeBuilder registers the kinds of this group version with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the kinds of this group version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion,
		&TerraformCluster{}, &TerraformClusterList{},
		&TerraformMachine{}, &TerraformMachineList{},
		&TerraformMachinePool{}, &TerraformMachinePoolList{},
		&TerraformClusterTemplate{}, &TerraformClusterTemplateList{},
		&TerraformMachineTemplate{}, &TerraformMachineTemplateList{},
		&TerraformMachinePoolTemplate{}, &TerraformMachinePoolTemplateList{},
		&TerraformClusterIdentity{}, &TerraformClusterIdentityList{},
	)
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}

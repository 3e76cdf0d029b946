package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime"
)

// addDefaultingFuncs registers the generated defaulters. Nothing in this version has a
// default today; the hook keeps defaulter-gen wired for when a field gets one.
func addDefaultingFuncs(scheme *runtime.Scheme) error {
	return RegisterDefaults(scheme)
}

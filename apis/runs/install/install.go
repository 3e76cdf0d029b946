// Package install registers the runs.captf.io API, internal and versioned, with a scheme.
package install

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"github.com/captf/captf/apis/runs"
	"github.com/captf/captf/apis/runs/v1alpha1"
)

// Install adds the internal and the v1alpha1 types, conversions, defaults and field labels of
// runs.captf.io to scheme, with v1alpha1 as the preferred version.
func Install(scheme *runtime.Scheme) {
	utilruntime.Must(runs.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	utilruntime.Must(scheme.SetVersionPriority(v1alpha1.SchemeGroupVersion))
}

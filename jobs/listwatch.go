package jobs

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// ManagedSelector selects the Jobs captf creates: captf.io/managed=true.
var ManagedSelector = labels.SelectorFromSet(labels.Set{LabelManaged: ManagedValue}).String()

// ManagedJobs lists and watches the Jobs ManagedSelector selects in every namespace: what the
// runs API server follows.
func ManagedJobs(kube kubernetes.Interface) *cache.ListWatch {
	return ManagedJobsIn(kube, metav1.NamespaceAll, nil)
}

// ManagedJobsIn lists and watches the Jobs ManagedSelector selects in namespace (every namespace
// when "") that also carry every label of also: what the controller's Job cache follows, narrowed
// to the namespace and watch filter it reconciles.
func ManagedJobsIn(kube kubernetes.Interface, namespace string, also map[string]string) *cache.ListWatch {
	set := labels.Set{LabelManaged: ManagedValue}
	for k, v := range also {
		set[k] = v
	}
	selector := labels.SelectorFromSet(set).String()
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return kube.BatchV1().Jobs(namespace).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return kube.BatchV1().Jobs(namespace).Watch(ctx, o)
		},
	}
}

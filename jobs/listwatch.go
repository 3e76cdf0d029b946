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
// controller's Job cache and the runs API server both follow.
func ManagedJobs(kube kubernetes.Interface) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = ManagedSelector
			return kube.BatchV1().Jobs(metav1.NamespaceAll).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = ManagedSelector
			return kube.BatchV1().Jobs(metav1.NamespaceAll).Watch(ctx, o)
		},
	}
}

package registry

import (
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/apis/runs"
	"github.com/captf/captf/apis/runs/v1alpha1"
	"github.com/captf/captf/jobs"
)

// NewSource returns a Source over a Reflector of the managed Jobs (captf.io/managed=true, stored
// as compact records without pod template or spec) and informers of the TerraformClusters,
// TerraformMachines and TerraformMachinePools (their history limits, plan and approval
// annotations). Start it with Run.
func NewSource(kube kubernetes.Interface, infra restclient.Interface) (*Source, error) {
	jobWatch := jobs.ManagedJobs(kube)

	owners := map[jobs.Kind]cache.Indexer{}
	var informers []cache.SharedIndexInformer
	for _, info := range infrav1.Kinds {
		kind := jobs.Kind(info.Kind)
		resource, err := resourceOf(kind)
		if err != nil {
			return nil, err
		}
		example, err := newOwnerObject(kind)
		if err != nil {
			return nil, err
		}
		inf := cache.NewSharedIndexInformerWithOptions(
			cache.NewListWatchFromClient(infra, resource, metav1.NamespaceAll, fields.Everything()),
			example, cache.SharedIndexInformerOptions{ObjectDescription: resource})
		if err := inf.SetTransform(transformOwner); err != nil {
			return nil, fmt.Errorf("setting the %s transform: %w", resource, err)
		}
		owners[kind] = inf.GetIndexer()
		informers = append(informers, inf)
	}

	s := newSource(newJobStore(), owners, time.Now)
	// The Jobs go straight from a Reflector into the Source's own store (jobFeed), which
	// publishes each change as it stores it.
	s.jobFeed = &jobFeed{src: s}
	s.jobReflector = cache.NewReflectorWithOptions(jobWatch, &batchv1.Job{}, s.jobFeed, cache.ReflectorOptions{Name: "managed Jobs"})
	s.informers = informers
	for _, inf := range informers {
		if _, err := inf.AddEventHandler(s.ownerEventHandler()); err != nil {
			return nil, fmt.Errorf("watching objects: %w", err)
		}
	}
	return s, nil
}

// NewAPIGroupInfo returns the runs.captf.io group with its resources: runs, plans and
// plans/approval.
func NewAPIGroupInfo(scheme *runtime.Scheme, codecs serializer.CodecFactory, src *Source, objects Objects, jobClient Jobs) genericapiserver.APIGroupInfo {
	info := genericapiserver.NewDefaultAPIGroupInfo(runs.GroupName, scheme, metav1.ParameterCodec, codecs)
	info.VersionedResourcesStorageMap[v1alpha1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		RunsResource:  NewRunREST(src),
		PlansResource: NewPlanREST(src),
		PlansResource + "/" + ApprovalSubresource: NewApprovalREST(src, objects, jobClient),
	}
	return info
}

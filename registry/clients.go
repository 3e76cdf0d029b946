package registry

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/jobs"
)

// FieldManager is the field manager of the server's writes.
const FieldManager = "captf-apiserver"

// infraScheme decodes the captf infrastructure kinds.
var infraScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := infrav1.AddToScheme(s); err != nil {
		panic(fmt.Sprintf("registering the infrastructure kinds: %v", err))
	}
	return s
}()

// NewInfrastructureClient returns a REST client for infrastructure.cluster.x-k8s.io/v1alpha1
// that decodes the typed objects.
func NewInfrastructureClient(config *rest.Config) (rest.Interface, error) {
	c := rest.CopyConfig(config)
	c.GroupVersion = &infrav1.GroupVersion
	c.APIPath = "/apis"
	c.ContentType = runtime.ContentTypeJSON
	c.NegotiatedSerializer = serializer.NewCodecFactory(infraScheme).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	client, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("building the infrastructure client: %w", err)
	}
	return client, nil
}

// restObjects implements Objects with a REST client of the infrastructure group.
type restObjects struct {
	client rest.Interface
}

// NewObjects returns Objects that read and annotate through client, a client of
// infrastructure.cluster.x-k8s.io/v1alpha1 (see NewInfrastructureClient).
func NewObjects(client rest.Interface) Objects { return restObjects{client: client} }

// Get implements Objects.
func (o restObjects) Get(ctx context.Context, kind jobs.Kind, namespace, name string) (*ownerRecord, error) {
	resource, err := resourceOf(kind)
	if err != nil {
		return nil, apierrors.NewNotFound(infrav1.GroupVersion.WithResource(string(kind)).GroupResource(), name)
	}
	obj, err := newOwnerObject(kind)
	if err != nil {
		return nil, err
	}
	if err := o.client.Get().Namespace(namespace).Resource(resource).Name(name).Do(ctx).Into(obj); err != nil {
		return nil, err
	}
	r, ok := recordOfOwner(obj)
	if !ok {
		return nil, fmt.Errorf("unexpected %T for %s", obj, kind)
	}
	return r, nil
}

// Annotate implements Objects with a JSON merge patch that carries the resourceVersion.
func (o restObjects) Annotate(ctx context.Context, kind jobs.Kind, namespace, name, resourceVersion string, annotations map[string]string, dryRun bool) error {
	resource, err := resourceOf(kind)
	if err != nil {
		return err
	}
	patch, err := annotationPatch(resourceVersion, annotations)
	if err != nil {
		return err
	}
	opts := metav1.PatchOptions{FieldManager: FieldManager}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	return o.client.Patch(types.MergePatchType).Namespace(namespace).Resource(resource).Name(name).
		VersionedParams(&opts, metav1.ParameterCodec).Body(patch).Do(ctx).Error()
}

// clientJobs implements Jobs with a clientset.
type clientJobs struct {
	client kubernetes.Interface
}

// NewJobs returns Jobs that read through client.
func NewJobs(client kubernetes.Interface) Jobs { return clientJobs{client: client} }

// Get implements Jobs: a Job without captf.io/managed=true is not found.
func (c clientJobs) Get(ctx context.Context, namespace, name string) (*jobRecord, error) {
	job, err := c.client.BatchV1().Jobs(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if job.Labels[jobs.LabelManaged] != jobs.ManagedValue {
		return nil, apierrors.NewNotFound(batchv1.Resource("jobs"), name)
	}
	return recordOfJob(job), nil
}

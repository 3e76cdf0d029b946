package testenv

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/captf/captf/hack/manifest"
)

// ReadManifests reads the objects of multi-document YAML files.
func ReadManifests(paths ...string) ([]*unstructured.Unstructured, error) {
	return manifest.ReadFiles(paths...)
}

// ApplyManifests creates the objects of YAML files, replacing any that exist, as
// `kubectl apply` would for a fresh install.
func (e *Env) ApplyManifests(ctx context.Context, paths ...string) error {
	objs, err := ReadManifests(paths...)
	if err != nil {
		return err
	}
	return e.ApplyObjects(ctx, objs...)
}

// ApplyObjects creates the objects, replacing any that exist, as `kubectl apply` would for a
// fresh install.
func (e *Env) ApplyObjects(ctx context.Context, objs ...*unstructured.Unstructured) error {
	c, err := client.New(e.Config, client.Options{})
	if err != nil {
		return err
	}
	for _, obj := range objs {
		err := c.Create(ctx, obj)
		if apierrors.IsAlreadyExists(err) {
			existing := &unstructured.Unstructured{}
			existing.SetGroupVersionKind(obj.GroupVersionKind())
			if err = c.Get(ctx, client.ObjectKeyFromObject(obj), existing); err == nil {
				obj.SetResourceVersion(existing.GetResourceVersion())
				err = c.Update(ctx, obj)
			}
		}
		if err != nil {
			return fmt.Errorf("applying %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	return nil
}

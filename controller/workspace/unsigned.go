package workspace

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/runkey"
)

// SignUnsigned signs the Jobs and durable inputs Secrets in namespace (every namespace when "")
// that carry no signature: the work of a controller that did not sign yet. It runs once, when
// the run key is made, before the controller starts: from then on only a signature is trusted,
// so what someone strips of its signature later is never signed again. A Job's result gets its
// digest, which a signed Job's result needs. It returns how many Jobs and Secrets it signed.
func SignUnsigned(ctx context.Context, c client.Client, key runkey.Key, namespace string) (signedJobs, signedSecrets int, err error) {
	log := logf.FromContext(ctx)
	managed := client.MatchingLabels{jobs.LabelManaged: jobs.ManagedValue}
	var jobList batchv1.JobList
	if err := c.List(ctx, &jobList, client.InNamespace(namespace), managed); err != nil {
		return 0, 0, fmt.Errorf("listing the Jobs to sign: %w", err)
	}
	for i := range jobList.Items {
		job := &jobList.Items[i]
		signed, err := signUnsigned(ctx, c, job, func(j *batchv1.Job) map[string]string {
			add := map[string]string{}
			if result, ok := j.Annotations[jobs.AnnotationResult]; ok && j.Annotations[runkey.AnnotationResultDigest] == "" {
				add[runkey.AnnotationResultDigest] = runkey.ResultDigest(result)
				metav1.SetMetaDataAnnotation(&j.ObjectMeta, runkey.AnnotationResultDigest, add[runkey.AnnotationResultDigest])
			}
			add[runkey.AnnotationSignature] = key.SignJob(j)
			return add
		})
		if err != nil {
			return signedJobs, signedSecrets, err
		}
		if signed {
			signedJobs++
			log.Info("signed a Job made before the run key", "job", client.ObjectKeyFromObject(job))
		}
	}
	var secrets corev1.SecretList
	if err := c.List(ctx, &secrets, client.InNamespace(namespace), managed); err != nil {
		return signedJobs, signedSecrets, fmt.Errorf("listing the durable inputs Secrets to sign: %w", err)
	}
	for i := range secrets.Items {
		secret := &secrets.Items[i]
		owner := durableOwner(secret)
		if owner == nil {
			continue
		}
		signed, err := signUnsigned(ctx, c, secret, func(s *corev1.Secret) map[string]string {
			return map[string]string{runkey.AnnotationSignature: key.Sign(durableFacts(s, owner)...)}
		})
		if err != nil {
			return signedJobs, signedSecrets, err
		}
		if signed {
			signedSecrets++
			log.Info("signed durable inputs written before the run key", "secret", client.ObjectKeyFromObject(secret))
		}
	}
	return signedJobs, signedSecrets, nil
}

// signUnsigned adds the annotations annotate computes to obj, unless it carries a signature. A
// conflict reads the object again and decides again.
func signUnsigned[T client.Object](ctx context.Context, c client.Client, obj T, annotate func(T) map[string]string) (bool, error) {
	signed := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if _, ok := obj.GetAnnotations()[runkey.AnnotationSignature]; ok {
			return nil
		}
		patch := client.MergeFromWithOptions(obj.DeepCopyObject().(T), client.MergeFromWithOptimisticLock{})
		for k, v := range annotate(obj) {
			a := obj.GetAnnotations()
			if a == nil {
				a = map[string]string{}
			}
			a[k] = v
			obj.SetAnnotations(a)
		}
		err := c.Patch(ctx, obj, patch)
		if apierrors.IsConflict(err) {
			if getErr := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); getErr != nil {
				return getErr
			}
		}
		signed = err == nil
		return err
	})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("signing %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
	}
	return signed, nil
}

// durableOwner is the captf object whose durable inputs secret is, by an owner reference and
// the name those inputs have; nil for any other Secret.
func durableOwner(secret *corev1.Secret) metav1.Object {
	for _, ref := range secret.OwnerReferences {
		gv, _ := schema.ParseGroupVersion(ref.APIVersion)
		kind := jobs.Kind(ref.Kind)
		if gv.Group == infrav1.GroupVersion.Group && kind.Valid() && secret.Name == jobs.InputsSecretName(kind, ref.Name) {
			return &metav1.ObjectMeta{Name: ref.Name, UID: ref.UID}
		}
	}
	return nil
}

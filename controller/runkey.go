package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/runkey"
)

// RunKeySecret is the Secret of the controller's namespace that holds the run key (key "key"),
// with which the controller signs its Jobs and durable inputs. The controller creates it on its
// first start; deleting it makes every signed Job and durable inputs Secret untrusted.
const RunKeySecret = "captf-run-key"

// runKeyData is the data key of RunKeySecret.
const runKeyData = "key"

// annotationUnsignedSigned on RunKeySecret records that the controller signed what a controller
// that did not sign left unsigned (workspace.SignUnsigned). Until it is there, every start signs
// again; once it is, nothing unsigned is ever signed for being there.
const annotationUnsignedSigned = "captf.io/unsigned-signed"

// LoadRunKey reads the run key from RunKeySecret in namespace, creating it on first use. Until
// the Secret records otherwise, it first signs the Jobs and durable inputs in watched (every
// namespace when "") that carry no signature: nothing unsigned exists there yet but the work of
// a controller that did not sign, since this one starts no Job before the key is loaded.
func LoadRunKey(ctx context.Context, c client.Client, namespace, watched string) (runkey.Key, error) {
	secret, err := runKeySecret(ctx, c, namespace)
	if err != nil {
		return runkey.Key{}, err
	}
	key, err := runkey.Of(secret.Data[runKeyData])
	if err != nil {
		return runkey.Key{}, fmt.Errorf("the run key Secret %s/%s: %w", namespace, RunKeySecret, err)
	}
	if _, done := secret.Annotations[annotationUnsignedSigned]; done {
		return key, nil
	}
	signedJobs, signedSecrets, err := workspace.SignUnsigned(ctx, c, key, watched)
	if err != nil {
		return runkey.Key{}, fmt.Errorf("signing what was made before the run key: %w", err)
	}
	patch := client.MergeFrom(secret.DeepCopy())
	metav1.SetMetaDataAnnotation(&secret.ObjectMeta, annotationUnsignedSigned, fmt.Sprintf("%d Jobs, %d durable inputs", signedJobs, signedSecrets))
	if err := c.Patch(ctx, secret, patch); err != nil {
		return runkey.Key{}, fmt.Errorf("recording the signing of what was made before the run key: %w", err)
	}
	log.FromContext(ctx).Info("signed what was made before the run key", "jobs", signedJobs, "durableInputs", signedSecrets)
	return key, nil
}

// runKeySecret reads RunKeySecret in namespace, creating it with a new key on first use.
func runKeySecret(ctx context.Context, c client.Client, namespace string) (*corev1.Secret, error) {
	key := client.ObjectKey{Namespace: namespace, Name: RunKeySecret}
	for range 2 {
		var secret corev1.Secret
		err := c.Get(ctx, key, &secret)
		switch {
		case err == nil:
			return &secret, nil
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("reading the run key Secret %s: %w", key, err)
		}
		fresh, err := runkey.New()
		if err != nil {
			return nil, err
		}
		secret = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: RunKeySecret, Namespace: namespace, Labels: map[string]string{jobs.LabelManaged: jobs.ManagedValue}},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{runKeyData: fresh.Bytes()},
		}
		switch err := c.Create(ctx, &secret); {
		case err == nil:
			return &secret, nil
		case !apierrors.IsAlreadyExists(err):
			return nil, fmt.Errorf("creating the run key Secret %s: %w", key, err)
		}
		// Another replica created it first: read theirs.
	}
	return nil, fmt.Errorf("the run key Secret %s was created and then could not be read", key)
}

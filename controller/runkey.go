package controller

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/runkey"
)

// RunKeySecret is the Secret of the controller's namespace that holds the run key (key "key"),
// with which the controller signs its Jobs and durable inputs. The controller creates it on its
// first start; deleting it makes every signed Job and durable inputs Secret untrusted.
const RunKeySecret = "captf-run-key"

// runKeyData is the data key of RunKeySecret.
const runKeyData = "key"

// LoadRunKey reads the run key from RunKeySecret in namespace, creating it on first use. The
// key's Since is the Secret's creation time: Jobs and durable inputs made before it, unsigned,
// come from a controller that did not sign yet.
func LoadRunKey(ctx context.Context, reader client.Reader, writer client.Writer, namespace string) (runkey.Key, error) {
	key := client.ObjectKey{Namespace: namespace, Name: RunKeySecret}
	for range 2 {
		var secret corev1.Secret
		err := reader.Get(ctx, key, &secret)
		switch {
		case err == nil:
			return runkey.Of(secret.Data[runKeyData], secret.CreationTimestamp.Time)
		case !apierrors.IsNotFound(err):
			return runkey.Key{}, fmt.Errorf("reading the run key Secret %s: %w", key, err)
		}
		fresh, err := NewRunKey(time.Time{})
		if err != nil {
			return runkey.Key{}, err
		}
		secret = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: RunKeySecret, Namespace: namespace, Labels: map[string]string{jobs.LabelManaged: jobs.ManagedValue}},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{runKeyData: fresh.Bytes()},
		}
		switch err := writer.Create(ctx, &secret); {
		case err == nil:
			return runkey.Of(secret.Data[runKeyData], secret.CreationTimestamp.Time)
		case !apierrors.IsAlreadyExists(err):
			return runkey.Key{}, fmt.Errorf("creating the run key Secret %s: %w", key, err)
		}
		// Another replica created it first: read theirs.
	}
	return runkey.Key{}, fmt.Errorf("the run key Secret %s was created and then could not be read", key)
}

// NewRunKey returns a new random run key, made at since.
func NewRunKey(since time.Time) (runkey.Key, error) {
	b := make([]byte, runkey.Size)
	if _, err := rand.Read(b); err != nil {
		return runkey.Key{}, fmt.Errorf("making a run key: %w", err)
	}
	return runkey.Of(b, since)
}

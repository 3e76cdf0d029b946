package workspace

import (
	"context"
	"fmt"
	"slices"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/statecrypt"
)

// minStatePassphrase is the shortest passphrase OpenTofu's pbkdf2 key provider takes.
const minStatePassphrase = 16

// stateKeys are the passphrases of an object's state encryption, as read and checked.
type stateKeys struct {
	// secret is the Secret they are in; empty when the object encrypts nothing.
	secret  string
	keyring statecrypt.Keyring
	current string
}

// ids are the key ids, sorted.
func (k stateKeys) ids() []string {
	ids := make([]string, 0, len(k.keyring))
	for id := range k.keyring {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// readStateKeys reads the passphrases spec.stateEncryption names. problem says why they cannot be
// used: the Secret is missing, has not opted in (captf.io/state-key=true: without the label,
// anyone who may edit the object could mount any Secret of the namespace into a run), lacks
// the current key, or holds a key that is not a valid key id with a long enough passphrase.
func readStateKeys(ctx context.Context, reader client.Reader, namespace string, enc *infrav1.StateEncryption) (keys stateKeys, problem string, err error) {
	if enc == nil {
		return stateKeys{}, "", nil
	}
	name := enc.SecretRef.Name
	var secret corev1.Secret
	switch err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &secret); {
	case apierrors.IsNotFound(err):
		return stateKeys{}, fmt.Sprintf("Secret %s (spec.stateEncryption.secretRef) does not exist", name), nil
	case err != nil:
		return stateKeys{}, "", fmt.Errorf("reading the state key Secret %s: %w", name, err)
	case secret.Labels[infrav1.StateKeyLabel] != "true":
		return stateKeys{}, fmt.Sprintf("Secret %s (spec.stateEncryption.secretRef) does not carry the label %s=true that lets captf use it for state keys", name, infrav1.StateKeyLabel), nil
	}
	if _, ok := secret.Data[enc.KeyID]; !ok {
		return stateKeys{}, fmt.Sprintf("Secret %s (spec.stateEncryption.secretRef) has no key %s (spec.stateEncryption.keyID)", name, enc.KeyID), nil
	}
	keys = stateKeys{secret: name, keyring: statecrypt.Keyring{}, current: enc.KeyID}
	for id, passphrase := range secret.Data {
		if !statecrypt.ValidKeyID(id) || len(passphrase) < minStatePassphrase || !utf8.Valid(passphrase) {
			return stateKeys{}, fmt.Sprintf("Secret %s (spec.stateEncryption.secretRef) key %q is not a key id (a letter, then letters, digits, '_' or '-') with a passphrase of at least %d characters of UTF-8 text", name, id, minStatePassphrase), nil
		}
		keys.keyring[id] = passphrase
	}
	return keys, "", nil
}

// stateKeysReady checks spec.stateEncryption before a Job mounts its Secret. ready is false when
// no Job may start; the op's condition and an event say why, naming the Secret, never what it
// holds.
func (p *pass) stateKeysReady(ctx context.Context, op jobs.Op) (keys stateKeys, ready bool, err error) {
	keys, problem, err := readStateKeys(ctx, p.r.APIReader, p.obj.GetNamespace(), p.obj.WorkspaceSpec().StateEncryption)
	if err != nil || problem == "" {
		return keys, err == nil, err
	}
	if c := conditions.Get(p.status().Conditions, conditionFor(op)); c == nil || c.Reason != conditions.ReasonStateKeysNotFound || c.Message != problem {
		p.event(nil, corev1.EventTypeWarning, EventStateKeysNotFound, "%s; no Job starts", problem)
	}
	setOpCondition(p.status(), p.stamp(), op, metav1.ConditionFalse, conditions.ReasonStateKeysNotFound, problem)
	return stateKeys{}, false, nil
}

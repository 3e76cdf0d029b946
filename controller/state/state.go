// Package state reads the Terraform/OpenTofu state that the kubernetes backend keeps in a Secret
// beside the object: whether it exists, which inputs it was applied from and what it holds.
package state

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/statecrypt"
)

// Workspace is the only backend workspace captf uses.
const Workspace = "default"

// dataKey is where the kubernetes backend keeps the gzip-compressed state.
const dataKey = "tfstate"

// maxStateBytes bounds the decompressed state the controller reads, so that a state Secret
// anyone with Secret rights wrote cannot exhaust its memory: gzip expands up to about 1000
// times, so the 1 MiB a Secret holds could decompress to a gigabyte. The kubernetes backend
// keeps the whole compressed state in that one Secret, and state JSON typically compresses ten
// to twenty times, so the states it stores stay well below the bound. The runner bounds a backup
// it restores the same.
const maxStateBytes = 64 << 20

// InputsHashAnnotation on the state Secret records the inputs hash of the last successful apply.
const InputsHashAnnotation = "captf.io/inputs-hash"

// SecretName is the name of the state Secret of a backend secret suffix.
func SecretName(suffix string) string { return "tfstate-" + Workspace + "-" + suffix }

// BackendOwnLabels are the labels the kubernetes backend itself puts on the state Secret and lock
// Lease of a secret suffix, beside those of its labels setting.
func BackendOwnLabels(suffix string) map[string]string {
	return map[string]string{
		"tfstate":                      "true",
		"tfstateSecretSuffix":          suffix,
		"tfstateWorkspace":             Workspace,
		"app.kubernetes.io/managed-by": "terraform",
	}
}

// LockLeaseName is the name of the Lease that locks the state of a backend secret suffix.
func LockLeaseName(suffix string) string { return "lock-" + SecretName(suffix) }

// Errors that make a state unreadable; each has its own StateReadable reason.
var (
	// ErrCorrupt: the Secret holds no decodable state.
	ErrCorrupt = statecrypt.ErrCorrupt
	// ErrEncrypted: the state is encrypted by OpenTofu and the controller has no key for it.
	ErrEncrypted = statecrypt.ErrEncrypted
	// ErrStateKey: the state is encrypted under a key id the controller has, but does not open
	// with its passphrase.
	ErrStateKey = statecrypt.ErrStateKey
	// ErrUnsupportedVersion: the state is not format version 4.
	ErrUnsupportedVersion = errors.New("state format version is not 4")
	// ErrTooLarge: the state decompresses to more than the controller reads. An error that is
	// ErrTooLarge is ErrCorrupt too: a Secret that large is a gzip bomb rather than a state the
	// backend wrote, and StateReadable reports it as corrupt.
	ErrTooLarge = errors.New("state is too large")
	// ErrNotEncrypted: the state is in the clear although the controller last read it encrypted.
	// Only the key's holder can write an encrypted state; a state in the clear in its place was
	// written by someone else, and its outputs are not to be trusted.
	ErrNotEncrypted = errors.New("state is in the clear although it was encrypted")
	// ErrPartsUnreadable: a part of a state kept in parts could not be read; the read is to be
	// retried, the state is not known to be wrong.
	ErrPartsUnreadable = errors.New("state parts cannot be read")
)

// State is what the controller needs to know of a state.
type State struct {
	// Exists is false when there is no state Secret or it holds no state.
	Exists bool
	// InputsHash is the inputs hash recorded after the last successful apply; empty when none is.
	InputsHash string
	// Serial and Lineage identify the state's version.
	Serial  int64
	Lineage string
	// Resources counts the managed resource instances.
	Resources int
	// Outputs are the module's outputs, when the root passes them through.
	Outputs map[string]json.RawMessage
	// KeyID is the key the state is encrypted under; empty for a state in the clear.
	KeyID string
}

// Empty reports whether the state holds no resources, as after a destroy.
func (s State) Empty() bool { return !s.Exists || s.Resources == 0 }

type stateFile struct {
	Version       int             `json:"version"`
	Serial        int64           `json:"serial"`
	Lineage       string          `json:"lineage"`
	EncryptedData json.RawMessage `json:"encrypted_data"`
	Outputs       map[string]struct {
		Value json.RawMessage `json:"value"`
	} `json:"outputs"`
	Resources []struct {
		Mode      string            `json:"mode"`
		Instances []json.RawMessage `json:"instances"`
	} `json:"resources"`
}

// Read reads the state from its Secret, joining a state kept in parts (jobs.StateParts) from
// reader; a nil Secret is no state. A part that cannot be read for another reason than its
// absence is ErrPartsUnreadable, a failed read rather than a state error.
func Read(ctx context.Context, reader client.Reader, secret *corev1.Secret, keys statecrypt.Keyring) (State, error) {
	if secret == nil {
		return State{}, nil
	}
	raw, err := Payload(ctx, reader, secret)
	if err != nil || raw == nil {
		return State{}, err
	}
	gz, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return State{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	data, err := io.ReadAll(io.LimitReader(gz, maxStateBytes+1))
	if err != nil {
		return State{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if len(data) > maxStateBytes {
		return State{}, fmt.Errorf("%w: %w: it decompresses to more than %d MiB", ErrCorrupt, ErrTooLarge, maxStateBytes>>20)
	}
	return Parse(data, secret.Annotations[InputsHashAnnotation], keys)
}

// Payload is the state as the backend stores it (gzip'd JSON) in its Secret, joined from its
// parts when the head holds a manifest; nil when the Secret holds no state.
func Payload(ctx context.Context, reader client.Reader, secret *corev1.Secret) ([]byte, error) {
	raw, ok := secret.Data[dataKey]
	if !ok {
		return nil, nil
	}
	if manifest, ok := jobs.StatePartsOf(raw); ok {
		return joinParts(ctx, reader, secret, manifest)
	}
	return raw, nil
}

// joinParts reads the parts a head's manifest names and checks them against it. A missing part
// or one that does not match is a corrupt state: the runner writes every part before the head
// that names them, so only a lost part or one written behind its back gives either.
func joinParts(ctx context.Context, reader client.Reader, head *corev1.Secret, manifest jobs.StateParts) ([]byte, error) {
	suffix := strings.TrimPrefix(head.Name, SecretName(""))
	joined, err := jobs.JoinStateParts(suffix, manifest, func(name string) ([]byte, bool, error) {
		var part corev1.Secret
		err := reader.Get(ctx, client.ObjectKey{Namespace: head.Namespace, Name: name}, &part)
		if apierrors.IsNotFound(err) {
			return nil, false, nil
		}
		return part.Data[dataKey], err == nil, err
	})
	switch {
	case errors.Is(err, jobs.ErrStateParts):
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	case err != nil:
		return nil, fmt.Errorf("%w: %w", ErrPartsUnreadable, err)
	}
	return joined, nil
}

// Parse reads a decompressed state document, decrypting it with keys when OpenTofu encrypted it.
func Parse(data []byte, inputsHash string, keys statecrypt.Keyring) (State, error) {
	data, keyID, err := statecrypt.Decrypt(data, keys)
	if err != nil {
		return State{}, err
	}
	var f stateFile
	if err := json.Unmarshal(data, &f); err != nil {
		return State{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if len(f.EncryptedData) > 0 {
		return State{}, ErrEncrypted
	}
	if f.Version != 4 {
		return State{}, fmt.Errorf("%w: version %d", ErrUnsupportedVersion, f.Version)
	}
	s := State{Exists: true, InputsHash: inputsHash, Serial: f.Serial, Lineage: f.Lineage, KeyID: keyID}
	for _, r := range f.Resources {
		if r.Mode == "managed" {
			s.Resources += len(r.Instances)
		}
	}
	if len(f.Outputs) > 0 {
		s.Outputs = make(map[string]json.RawMessage, len(f.Outputs))
		for name, o := range f.Outputs {
			s.Outputs[name] = o.Value
		}
	}
	return s, nil
}

// Compress encodes a state document as the kubernetes backend stores it; tests use it to write
// states behind OpenTofu's back.
func Compress(data []byte) ([]byte, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	if _, err := gz.Write(data); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Package statecrypt opens OpenTofu's encrypted states (pbkdf2 key provider, aes_gcm method) with
// a keyring of passphrases: the controller to read outputs, the runner to restore a backup,
// which OpenTofu's state push takes only in the clear.
package statecrypt

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/pbkdf2"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync"
)

// Errors of Decrypt; controller/state reports each under a StateReadable reason of its own.
var (
	// ErrCorrupt: the document is not a state, or its encryption metadata is out of bounds.
	ErrCorrupt = errors.New("state is corrupt")
	// ErrEncrypted: the state is encrypted and no key of the keyring names its key provider.
	ErrEncrypted = errors.New("state is encrypted")
)

// ErrStateKey means that a key of the keyring names the state's key provider but the state does
// not open with it: a wrong passphrase under the right key id, or a tampered ciphertext.
var ErrStateKey = errors.New("state does not open with its key")

// Keyring maps a key id to its passphrase. The runner names each OpenTofu pbkdf2 key provider
// by its key id, so the id finds the key's metadata in an encrypted state.
type Keyring map[string][]byte

var keyIDPattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,62}$`)

// ValidKeyID reports whether id can name a key: a letter, then up to 62 letters, digits, '_'
// or '-', so that it is a valid HCL block label and a Secret key.
func ValidKeyID(id string) bool { return keyIDPattern.MatchString(id) }

// Bounds on the key derivation a state's metadata asks for. Anyone who may write the state
// Secret writes this metadata, and an unbounded iteration count would make every read burn
// the controller's CPU; OpenTofu itself refuses fewer than 200000 iterations.
const (
	minIterations = 200000
	maxIterations = 600000
	maxSaltBytes  = 64
	// encryptionVersion is the only envelope version OpenTofu 1.10 writes.
	encryptionVersion = "v0"
	// gcmNonceBytes prefix the ciphertext OpenTofu's aes_gcm method writes.
	gcmNonceBytes = 12
)

// pbkdf2Meta is what OpenTofu's pbkdf2 key provider records beside the state it encrypts.
type pbkdf2Meta struct {
	Salt         []byte `json:"salt"`
	Iterations   int64  `json:"iterations"`
	HashFunction string `json:"hash_function"`
	KeyLength    int    `json:"key_length"`
}

// envelope is the encrypted state as OpenTofu writes it: serial and lineage stay in the clear.
type envelope struct {
	Serial            *int64            `json:"serial"`
	Lineage           string            `json:"lineage"`
	Meta              map[string][]byte `json:"meta"`
	EncryptedData     []byte            `json:"encrypted_data"`
	EncryptionVersion string            `json:"encryption_version"`
}

// Decrypt opens a state that OpenTofu encrypted with a pbkdf2 key provider and the aes_gcm
// method. doc is the decompressed state document. A document without encrypted_data is
// returned as it is, with an empty key id; otherwise Decrypt returns the plain state and the
// id of the key that opened it. Errors:
//   - ErrEncrypted: no key of keys names a key provider of the state (or keys is empty);
//   - ErrStateKey: a key names one, but the state does not open with it;
//   - ErrCorrupt: the envelope is malformed, its metadata asks for a derivation out of bounds,
//     or the serial and lineage in the clear differ from those inside.
//
// Ids that are not valid key ids are ignored: they can name no key provider.
func Decrypt(doc []byte, keys Keyring) (plain []byte, keyID string, err error) {
	var probe struct {
		EncryptedData json.RawMessage `json:"encrypted_data"`
	}
	if err := json.Unmarshal(doc, &probe); err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if len(probe.EncryptedData) == 0 {
		return doc, "", nil
	}
	env, err := parseEnvelope(doc)
	if err != nil {
		return nil, "", err
	}
	candidates, err := candidateKeys(env, keys)
	if err != nil {
		return nil, "", err
	}
	if len(candidates) == 0 {
		return nil, "", ErrEncrypted
	}
	for _, c := range candidates {
		plain, ok, err := open(env.EncryptedData, keys[c.id], c.meta)
		if err != nil {
			return nil, "", err
		}
		if ok {
			if err := checkIdentity(env, plain); err != nil {
				return nil, "", err
			}
			return plain, c.id, nil
		}
	}
	return nil, "", ErrStateKey
}

func parseEnvelope(doc []byte) (envelope, error) {
	var env envelope
	if err := json.Unmarshal(doc, &env); err != nil {
		return env, fmt.Errorf("%w: encrypted state: %w", ErrCorrupt, err)
	}
	switch {
	case env.EncryptionVersion != encryptionVersion:
		return env, fmt.Errorf("%w: encryption version %q, want %q", ErrCorrupt, env.EncryptionVersion, encryptionVersion)
	case env.Serial == nil || env.Lineage == "":
		return env, fmt.Errorf("%w: encrypted state without serial or lineage", ErrCorrupt)
	case len(env.EncryptedData) < gcmNonceBytes:
		return env, fmt.Errorf("%w: encrypted data shorter than its nonce", ErrCorrupt)
	}
	return env, nil
}

type candidate struct {
	id   string
	meta pbkdf2Meta
}

// candidateKeys lists the keys of the keyring whose provider left metadata in the state, in
// key id order, with their metadata checked against the bounds before anything is derived.
func candidateKeys(env envelope, keys Keyring) ([]candidate, error) {
	ids := make([]string, 0, len(keys))
	for id := range keys {
		if ValidKeyID(id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	var out []candidate
	for _, id := range ids {
		raw, ok := env.Meta["key_provider.pbkdf2."+id]
		if !ok {
			continue
		}
		var m pbkdf2Meta
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("%w: metadata of key %s: %w", ErrCorrupt, id, err)
		}
		if err := m.check(); err != nil {
			return nil, fmt.Errorf("%w: metadata of key %s: %w", ErrCorrupt, id, err)
		}
		out = append(out, candidate{id: id, meta: m})
	}
	return out, nil
}

func (m pbkdf2Meta) check() error {
	switch {
	case m.Iterations < minIterations || m.Iterations > maxIterations:
		return fmt.Errorf("%d iterations, outside %d..%d", m.Iterations, minIterations, maxIterations)
	case m.HashFunction != "sha256" && m.HashFunction != "sha512":
		return fmt.Errorf("hash function %q, want sha256 or sha512", m.HashFunction)
	case m.KeyLength != 16 && m.KeyLength != 24 && m.KeyLength != 32:
		return fmt.Errorf("key length %d, want 16, 24 or 32", m.KeyLength)
	case len(m.Salt) < 1 || len(m.Salt) > maxSaltBytes:
		return fmt.Errorf("salt of %d bytes, want 1..%d", len(m.Salt), maxSaltBytes)
	}
	return nil
}

// open decrypts data with the key derived from passphrase; ok is false when it does not
// authenticate.
func open(data, passphrase []byte, m pbkdf2Meta) (plain []byte, ok bool, err error) {
	key, err := deriveKey(passphrase, m)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrStateKey, err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	plain, err = gcm.Open(nil, data[:gcmNonceBytes], data[gcmNonceBytes:], nil)
	if err != nil {
		return nil, false, nil
	}
	return plain, true, nil
}

// checkIdentity compares the serial and lineage in the clear with those inside, as OpenTofu
// does: otherwise a state's envelope could be moved onto another version's ciphertext.
func checkIdentity(env envelope, plain []byte) error {
	var inner struct {
		Serial  *int64 `json:"serial"`
		Lineage string `json:"lineage"`
	}
	if err := json.Unmarshal(plain, &inner); err != nil {
		return fmt.Errorf("%w: decrypted state: %w", ErrCorrupt, err)
	}
	if inner.Serial == nil || *inner.Serial != *env.Serial || inner.Lineage != env.Lineage {
		return fmt.Errorf("%w: the serial and lineage in the clear differ from those encrypted", ErrCorrupt)
	}
	return nil
}

// derivedKeys caches derived keys, so that reading the same state again, as every pass of a
// reconcile does until the next apply writes a fresh salt, costs no PBKDF2 run.
var derivedKeys = struct {
	sync.Mutex
	m map[string][]byte
}{m: map[string][]byte{}}

// maxDerivedKeys bounds the cache; it is cleared when full, which only costs derivations.
const maxDerivedKeys = 256

func deriveKey(passphrase []byte, m pbkdf2Meta) ([]byte, error) {
	id := cacheKey(passphrase, m)
	derivedKeys.Lock()
	key, ok := derivedKeys.m[id]
	derivedKeys.Unlock()
	if ok {
		return key, nil
	}
	h := sha512.New
	if m.HashFunction == "sha256" {
		h = sha256.New
	}
	key, err := pbkdf2.Key(h, string(passphrase), m.Salt, int(m.Iterations), m.KeyLength)
	if err != nil {
		return nil, err
	}
	derivedKeys.Lock()
	if len(derivedKeys.m) >= maxDerivedKeys {
		clear(derivedKeys.m)
	}
	derivedKeys.m[id] = key
	derivedKeys.Unlock()
	return key, nil
}

// cacheKey identifies a derivation without keeping the passphrase itself.
func cacheKey(passphrase []byte, m pbkdf2Meta) string {
	sum := sha256.Sum256(passphrase)
	var b bytes.Buffer
	b.Write(sum[:])
	b.WriteString(m.HashFunction)
	b.WriteByte(0)
	_ = binary.Write(&b, binary.BigEndian, m.Iterations)
	_ = binary.Write(&b, binary.BigEndian, int64(m.KeyLength))
	b.Write(m.Salt)
	return b.String()
}

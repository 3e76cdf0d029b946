package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/statecrypt"
	"github.com/captf/captf/runner"
)

// stateKeyDir writes passphrase files as the state-keys volume holds them, one per key id.
func (h *harness) stateKeyDir(keys map[string]string) string {
	h.t.Helper()
	dir := h.t.TempDir()
	for id, passphrase := range keys {
		if err := os.WriteFile(filepath.Join(dir, id), []byte(passphrase), 0o440); err != nil {
			h.t.Fatal(err)
		}
	}
	return dir
}

// encrypted runs with the keys of dir, writing under current.
func encrypted(dir, current string, acceptPlaintext bool) func(*runner.Options) {
	return func(o *runner.Options) {
		o.StateKeys, o.StateKey, o.StateAcceptPlaintext = dir, current, acceptPlaintext
	}
}

// storedState is the state document the backend stored, decompressed, and its encryption.
func (h *harness) storedState() (doc []byte, meta map[string]json.RawMessage) {
	h.t.Helper()
	doc = gunzip(h.t, h.stateSecret().Data["tfstate"])
	var envelope struct {
		Meta map[string]json.RawMessage `json:"meta"`
	}
	if err := json.Unmarshal(doc, &envelope); err != nil {
		h.t.Fatal(err)
	}
	return doc, envelope.Meta
}

const (
	passphraseOne = "one-passphrase-of-the-tests-0001"
	passphraseTwo = "two-passphrase-of-the-tests-0002"
)

func TestEncryptedStateNeedsItsKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "basic")
	keys := h.stateKeyDir(map[string]string{"one": passphraseOne})
	inputs := vars("name", "secret-name")

	first := h.run(jobs.OpApply, inputs, encrypted(keys, "one", false)).mustSucceed(t)
	if strings.Contains(first.log, passphraseOne) {
		t.Error("the log holds the passphrase")
	}
	doc, meta := h.storedState()
	if _, ok := meta["key_provider.pbkdf2.one"]; !ok || bytes.Contains(doc, []byte("secret-name")) || bytes.Contains(doc, []byte(`"resources"`)) {
		t.Fatalf("the stored state is not encrypted under key one: %.300s", doc)
	}
	plain, keyID, err := statecrypt.Decrypt(doc, statecrypt.Keyring{"one": []byte(passphraseOne)})
	if err != nil || keyID != "one" || !bytes.Contains(plain, []byte("secret-name")) {
		t.Fatalf("the controller's decryption: key %q, %v", keyID, err)
	}
	again := h.run(jobs.OpApply, inputs, encrypted(keys, "one", false)).mustSucceed(t)
	if again.Changes == nil || *again.Changes != (jobs.Changes{}) {
		t.Errorf("a second apply with the key changes %+v, want none", again.Changes)
	}

	before := h.stateSecret().ResourceVersion
	without := h.run(jobs.OpApply, inputs, nil).mustFail(t, jobs.ErrorKindStep)
	wrong := h.run(jobs.OpApply, inputs, encrypted(h.stateKeyDir(map[string]string{"one": passphraseTwo}), "one", false)).mustFail(t, jobs.ErrorKindStep)
	for _, failed := range []runResult{without, wrong} {
		if failed.Error.Step != "init" && failed.Error.Step != "apply" {
			t.Errorf("error %+v, want the state unreadable", failed.Error)
		}
	}
	if !strings.Contains(without.Error.Tail, "encrypted") {
		t.Errorf("without the key: %q, want the state named encrypted", without.Error.Tail)
	}
	if after := h.stateSecret().ResourceVersion; after != before {
		t.Error("a run without the right key wrote the state")
	}

	// TF_ENCRYPTION is the runner's: one from the pod's environment never reaches OpenTofu,
	// which would otherwise encrypt this other object's state with its passphrase.
	other := h.sibling()
	forged := other.run(jobs.OpApply, inputs, func(o *runner.Options) {
		o.Environ = append(o.Environ, "TF_ENCRYPTION="+`key_provider "pbkdf2" "x" {
  passphrase = "`+passphraseTwo+`"
}
method "aes_gcm" "x" {
  keys = key_provider.pbkdf2.x
}
state {
  method = method.aes_gcm.x
}`)
	}).mustSucceed(t)
	if !strings.Contains(forged.log, "TF_ENCRYPTION") {
		t.Error("the log does not report dropping TF_ENCRYPTION")
	}
	if _, meta := other.storedState(); meta != nil {
		t.Errorf("a TF_ENCRYPTION of the pod's environment encrypted the state (meta %v)", meta)
	}
}

func TestAStateIsEncryptedOnlyWhenThePlaintextIsAccepted(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "basic")
	keys := h.stateKeyDir(map[string]string{"one": passphraseOne})
	inputs := vars("name", "a")
	h.run(jobs.OpApply, inputs, nil).mustSucceed(t)

	// Enforced: a state in the clear is never read, so it is never taken for an encrypted one.
	h.run(jobs.OpRefresh, inputs, encrypted(keys, "one", false)).mustFail(t, jobs.ErrorKindStep)
	if _, meta := h.storedState(); meta != nil {
		t.Fatal("an enforced run wrote the plaintext state")
	}
	h.run(jobs.OpRefresh, inputs, encrypted(keys, "one", true)).mustSucceed(t)
	if _, meta := h.storedState(); meta["key_provider.pbkdf2.one"] == nil {
		t.Fatalf("a refresh that accepts the plaintext left it in the clear (meta %v)", meta)
	}
}

func TestAKeyRotationRewritesTheStateUnderTheNewKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "basic")
	inputs := vars("name", "a")
	h.run(jobs.OpApply, inputs, encrypted(h.stateKeyDir(map[string]string{"one": passphraseOne}), "one", false)).mustSucceed(t)

	both := h.stateKeyDir(map[string]string{"one": passphraseOne, "two": passphraseTwo})
	h.run(jobs.OpRefresh, inputs, encrypted(both, "two", false)).mustSucceed(t)
	if _, meta := h.storedState(); meta["key_provider.pbkdf2.two"] == nil {
		t.Fatalf("after the refresh under key two the state has key metadata %v", meta)
	}
	// The old key may go.
	h.run(jobs.OpApply, inputs, encrypted(h.stateKeyDir(map[string]string{"two": passphraseTwo}), "two", false)).mustSucceed(t)
}

func TestARestoreOfAnEncryptedBackupPushesItUnderTheCurrentKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "basic")
	keys := h.stateKeyDir(map[string]string{"one": passphraseOne})
	inputs := vars("name", "a", "items", 2)
	h.run(jobs.OpApply, inputs, encrypted(keys, "one", false)).mustSucceed(t)
	backup := h.stateSecret().Data["tfstate"]
	h.run(jobs.OpDestroy, inputs, encrypted(keys, "one", false)).mustSucceed(t)

	config := h.renderBackendOnly()
	if err := os.Mkdir(filepath.Join(config, "restore"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(config, "restore", "0"), backup, 0o644); err != nil {
		t.Fatal(err)
	}
	o := h.options(jobs.OpRestore, config)
	o.RestoreChunks, o.RestoreResources = 1, 3
	encrypted(keys, "one", false)(&o)
	h.runOptions(context.Background(), o).mustSucceed(t)
	doc, meta := h.storedState()
	plain, _, err := statecrypt.Decrypt(doc, statecrypt.Keyring{"one": []byte(passphraseOne)})
	if meta["key_provider.pbkdf2.one"] == nil || err != nil || bytes.Count(plain, []byte(`"terraform_data"`)) != 2 {
		t.Fatalf("the restored state: meta %v, %v", meta, err)
	}
}

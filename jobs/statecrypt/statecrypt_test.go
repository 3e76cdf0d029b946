package statecrypt

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

//go:generate sh testdata/gen.sh

// The passphrases testdata/gen.sh encrypts its states with.
var (
	oldKey    = []byte("old-passphrase-for-tests-0001")
	newKey    = []byte("new-passphrase-for-tests-0002")
	sha256Key = []byte("sha-passphrase-for-tests-0003")
)

// fixture reads a state that OpenTofu wrote (testdata/gen.sh).
func fixture(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// edit rewrites a fixture's envelope; meta edits the metadata of the key provider id.
func edit(name string, envelope func(map[string]any), meta func(map[string]any)) func(*testing.T) []byte {
	return func(t *testing.T) []byte {
		t.Helper()
		var doc map[string]any
		if err := json.Unmarshal(fixture(t, name), &doc); err != nil {
			t.Fatal(err)
		}
		if meta != nil {
			metas := doc["meta"].(map[string]any)
			for k, v := range metas {
				raw, err := base64.StdEncoding.DecodeString(v.(string))
				if err != nil {
					t.Fatal(err)
				}
				var m map[string]any
				if err := json.Unmarshal(raw, &m); err != nil {
					t.Fatal(err)
				}
				meta(m)
				raw, err = json.Marshal(m)
				if err != nil {
					t.Fatal(err)
				}
				metas[k] = base64.StdEncoding.EncodeToString(raw)
			}
		}
		if envelope != nil {
			envelope(doc)
		}
		out, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
}

func file(name string) func(*testing.T) []byte {
	return func(t *testing.T) []byte { return fixture(t, name) }
}

// decryptWithin runs Decrypt and fails the test if it does not return within a bound far above
// the cost of the derivations the bounds allow, so a forged derivation cannot pass unnoticed.
func decryptWithin(t *testing.T, doc []byte, keys Keyring) ([]byte, string, error) {
	t.Helper()
	type result struct {
		plain []byte
		id    string
		err   error
	}
	done := make(chan result, 1)
	go func() {
		plain, id, err := Decrypt(doc, keys)
		done <- result{plain, id, err}
	}()
	select {
	case r := <-done:
		return r.plain, r.id, r.err
	case <-time.After(20 * time.Second):
		t.Fatal("Decrypt did not return within 20s")
		return nil, "", nil
	}
}

func TestDecrypt(t *testing.T) {
	both := Keyring{"old": oldKey, "new": newKey}
	salt := func(n int) string { return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, n)) }
	for _, tc := range []struct {
		name string
		doc  func(*testing.T) []byte
		keys Keyring
		// wantErr is the error Decrypt returns; otherwise it returns the plain state with the
		// greeting output, opened with wantKey.
		wantErr error
		wantKey string
	}{
		{name: "opens a state OpenTofu encrypted", doc: file("new.tfstate"), keys: Keyring{"new": newKey}, wantKey: "new"},
		{name: "opens a sha256 key of 24 bytes", doc: file("sha256.tfstate"), keys: Keyring{"sha": sha256Key}, wantKey: "sha"},
		{name: "a keyring with the old and the new key opens a state under the old", doc: file("old.tfstate"), keys: both, wantKey: "old"},
		{name: "a keyring with the old and the new key opens a state under the new", doc: file("new.tfstate"), keys: both, wantKey: "new"},
		{name: "an invalid key id names no key provider", doc: file("new.tfstate"), keys: Keyring{"key_provider.pbkdf2.new": newKey}, wantErr: ErrEncrypted},
		{name: "no key of the keyring names the state's key provider", doc: file("old.tfstate"), keys: Keyring{"new": newKey}, wantErr: ErrEncrypted},
		{name: "an empty keyring", doc: file("old.tfstate"), keys: nil, wantErr: ErrEncrypted},
		{name: "a wrong passphrase under the state's key id", doc: file("old.tfstate"), keys: Keyring{"old": newKey}, wantErr: ErrStateKey},
		{name: "a tampered ciphertext", doc: edit("old.tfstate", func(d map[string]any) {
			data, _ := base64.StdEncoding.DecodeString(d["encrypted_data"].(string))
			data[len(data)/2] ^= 1
			d["encrypted_data"] = base64.StdEncoding.EncodeToString(data)
		}, nil), keys: both, wantErr: ErrStateKey},
		{name: "a forged iteration count is refused before any derivation", doc: edit("old.tfstate", nil, func(m map[string]any) { m["iterations"] = 2e9 }), keys: both, wantErr: ErrCorrupt},
		{name: "more iterations than OpenTofu's default, which captf never writes", doc: edit("old.tfstate", nil, func(m map[string]any) { m["iterations"] = 600001 }), keys: both, wantErr: ErrCorrupt},
		{name: "fewer iterations than OpenTofu allows", doc: edit("old.tfstate", nil, func(m map[string]any) { m["iterations"] = 199999 }), keys: both, wantErr: ErrCorrupt},
		{name: "an unknown hash function", doc: edit("old.tfstate", nil, func(m map[string]any) { m["hash_function"] = "md5" }), keys: both, wantErr: ErrCorrupt},
		{name: "a key length AES does not take", doc: edit("old.tfstate", nil, func(m map[string]any) { m["key_length"] = 20 }), keys: both, wantErr: ErrCorrupt},
		{name: "an oversize salt", doc: edit("old.tfstate", nil, func(m map[string]any) { m["salt"] = salt(65) }), keys: both, wantErr: ErrCorrupt},
		{name: "an empty salt", doc: edit("old.tfstate", nil, func(m map[string]any) { m["salt"] = "" }), keys: both, wantErr: ErrCorrupt},
		{name: "a tampered serial", doc: edit("old.tfstate", func(d map[string]any) { d["serial"] = 2 }, nil), keys: both, wantErr: ErrCorrupt},
		{name: "a tampered lineage", doc: edit("old.tfstate", func(d map[string]any) { d["lineage"] = "00000000-0000-0000-0000-000000000000" }, nil), keys: both, wantErr: ErrCorrupt},
		{name: "an unknown encryption version", doc: edit("old.tfstate", func(d map[string]any) { d["encryption_version"] = "v1" }, nil), keys: both, wantErr: ErrCorrupt},
		{name: "no JSON", doc: func(*testing.T) []byte { return []byte("{") }, keys: both, wantErr: ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plain, id, err := decryptWithin(t, tc.doc(t), tc.keys)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Decrypt: %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decrypt: %v", err)
			}
			if id != tc.wantKey {
				t.Errorf("key id %q, want %q", id, tc.wantKey)
			}
			var s struct {
				Outputs map[string]struct {
					Value json.RawMessage `json:"value"`
				} `json:"outputs"`
			}
			if err := json.Unmarshal(plain, &s); err != nil {
				t.Fatalf("the decrypted state: %v", err)
			}
			if got := string(s.Outputs["greeting"].Value); got != `"hello"` {
				t.Errorf("output greeting = %s, want \"hello\"", got)
			}
		})
	}
}

// A plaintext state passes through as it is, whatever the keyring.
func TestDecryptPassesAPlaintextStateUnchanged(t *testing.T) {
	doc := fixture(t, "plain.tfstate")
	plain, id, err := Decrypt(doc, Keyring{"old": oldKey})
	if err != nil || id != "" || !bytes.Equal(plain, doc) {
		t.Fatalf("Decrypt = %d bytes, %q, %v; want the document unchanged, no key, no error", len(plain), id, err)
	}
}

// Reading a state again takes its key from the cache: a poisoned cache entry shows it is used.
func TestDecryptReusesTheDerivedKey(t *testing.T) {
	doc := fixture(t, "new.tfstate")
	keys := Keyring{"new": newKey}
	if _, _, err := Decrypt(doc, keys); err != nil {
		t.Fatal(err)
	}
	env, err := parseEnvelope(doc)
	if err != nil {
		t.Fatal(err)
	}
	cands, err := candidateKeys(env, keys)
	if err != nil || len(cands) != 1 {
		t.Fatalf("candidates %v, %v", cands, err)
	}
	id := cacheKey(newKey, cands[0].meta)
	derivedKeys.Lock()
	_, cached := derivedKeys.m[id]
	derivedKeys.m[id] = bytes.Repeat([]byte{0}, 32)
	derivedKeys.Unlock()
	t.Cleanup(func() {
		derivedKeys.Lock()
		delete(derivedKeys.m, id)
		derivedKeys.Unlock()
	})
	if !cached {
		t.Fatal("the derived key is not cached")
	}
	if _, _, err := Decrypt(doc, keys); !errors.Is(err, ErrStateKey) {
		t.Fatalf("Decrypt with a poisoned cache: %v, want ErrStateKey (the cached key used)", err)
	}
}

// The cache is cleared when full rather than growing with every salt a state was written with.
func TestDerivedKeysStayBounded(t *testing.T) {
	derivedKeys.Lock()
	for i := range maxDerivedKeys {
		derivedKeys.m[string(rune(i))] = nil
	}
	derivedKeys.Unlock()
	m := pbkdf2Meta{Salt: []byte{1}, Iterations: minIterations, HashFunction: "sha256", KeyLength: 16}
	if _, err := deriveKey([]byte("p"), m); err != nil {
		t.Fatal(err)
	}
	derivedKeys.Lock()
	n := len(derivedKeys.m)
	_, cached := derivedKeys.m[cacheKey([]byte("p"), m)]
	derivedKeys.Unlock()
	if n > maxDerivedKeys || !cached {
		t.Fatalf("%d cached keys, the new one cached: %v; want at most %d with the new one", n, cached, maxDerivedKeys)
	}
}

func TestValidKeyID(t *testing.T) {
	for id, want := range map[string]bool{
		"k1": true, "old": true, "K_2-x": true, strings.Repeat("a", 63): true,
		"": false, "1k": false, "-k": false, "k.1": false, "k 1": false, strings.Repeat("a", 64): false,
	} {
		if got := ValidKeyID(id); got != want {
			t.Errorf("ValidKeyID(%q) = %v, want %v", id, got, want)
		}
	}
}

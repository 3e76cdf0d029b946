package runner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/captf/captf/jobs/statecrypt"
)

// encryptionIterations is the PBKDF2 iteration count of every state key: OpenTofu's minimum.
// The passphrases are 256-bit random values, not words a person chose, so more iterations would
// add no strength, only the cost of the two or three derivations each command makes.
const encryptionIterations = 200000

// plaintextMethod names the unencrypted method that reads a state written before encryption.
const plaintextMethod = "plaintext"

// EncryptionConfig returns the OpenTofu state encryption configuration (for TF_ENCRYPTION) of
// the keys ids, whose passphrases are the files dir/<id>. Each key is a pbkdf2 key provider
// and an aes_gcm method, both named by its id, so the controller finds a state's key by the
// name of its metadata. The state is written under current and read under current, then under
// the other keys in id order, and, when acceptPlaintext, as plaintext: OpenTofu rewrites a
// state read any other way than under current on the next apply. Without acceptPlaintext the
// configuration is enforced, so OpenTofu never reads or writes a plaintext state.
//
// A passphrase file is read as it is, without trimming, so its bytes are the passphrase the
// controller decrypts with; OpenTofu needs UTF-8 text of at least 16 characters. Plan files
// are left unencrypted: they stay in the pod, beside the passphrases that would open them.
func EncryptionConfig(dir string, ids []string, current string, acceptPlaintext bool) (string, error) {
	if err := checkKeys(dir, ids, current); err != nil {
		return "", err
	}
	others := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == current })
	slices.Sort(others)

	var b strings.Builder
	for _, id := range append([]string{current}, others...) {
		fmt.Fprintf(&b, "key_provider \"pbkdf2\" %q {\n", id)
		fmt.Fprintf(&b, "  passphrase    = file(%s)\n", hclString(filepath.Join(dir, id)))
		fmt.Fprintf(&b, "  iterations    = %d\n", encryptionIterations)
		b.WriteString("  hash_function = \"sha512\"\n  key_length    = 32\n}\n\n")
		fmt.Fprintf(&b, "method \"aes_gcm\" %q {\n  keys = key_provider.pbkdf2.%s\n}\n\n", id, id)
	}
	fallbacks := make([]string, 0, len(others)+1)
	for _, id := range others {
		fallbacks = append(fallbacks, "method.aes_gcm."+id)
	}
	if acceptPlaintext {
		fmt.Fprintf(&b, "method \"unencrypted\" %q {}\n\n", plaintextMethod)
		fallbacks = append(fallbacks, "method.unencrypted."+plaintextMethod)
	}
	fmt.Fprintf(&b, "state {\n  method   = method.aes_gcm.%s\n  enforced = %t\n", current, !acceptPlaintext)
	writeFallbacks(&b, fallbacks, "  ")
	b.WriteString("}\n")
	return b.String(), nil
}

func checkKeys(dir string, ids []string, current string) error {
	if !filepath.IsAbs(dir) {
		// file() resolves a relative path against OpenTofu's working directory, not the runner's.
		return fmt.Errorf("state key directory %q is not absolute", dir)
	}
	if strings.ContainsFunc(dir, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return fmt.Errorf("state key directory %q holds a control character", dir)
	}
	if len(ids) == 0 {
		return errors.New("no state keys")
	}
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if !statecrypt.ValidKeyID(id) {
			return fmt.Errorf("state key id %q is not a letter followed by up to 62 letters, digits, '_' or '-'", id)
		}
		if seen[id] {
			return fmt.Errorf("state key id %q is given twice", id)
		}
		seen[id] = true
	}
	if !seen[current] {
		return fmt.Errorf("the current state key %q is not among the keys", current)
	}
	return nil
}

// writeFallbacks nests one fallback block per method, each tried after those above it.
func writeFallbacks(b *strings.Builder, methods []string, indent string) {
	if len(methods) == 0 {
		return
	}
	fmt.Fprintf(b, "%sfallback {\n%s  method = %s\n", indent, indent, methods[0])
	writeFallbacks(b, methods[1:], indent+"  ")
	fmt.Fprintf(b, "%s}\n", indent)
}

// hclString quotes s as an HCL string literal: beside quotes and backslashes, HCL reads "${"
// and "%{" as the start of a template, which doubling the sign escapes.
func hclString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "${", "$${", "%{", "%%{")
	return `"` + r.Replace(s) + `"`
}

// readStateKeys reads the passphrase files of dir (a mounted Secret: its ".." entries are the
// volume's own), one per key id.
func readStateKeys(dir string) (statecrypt.Keyring, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the state keys: %w", err)
	}
	keys := statecrypt.Keyring{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("reading the state keys: %w", err)
		}
		keys[e.Name()] = data
	}
	return keys, nil
}

// stateEncryptionEnv is TF_ENCRYPTION for the run's state keys, and the keys.
func (o Options) stateEncryptionEnv() (string, statecrypt.Keyring, error) {
	keys, err := readStateKeys(o.StateKeys)
	if err != nil {
		return "", nil, err
	}
	ids := make([]string, 0, len(keys))
	for id := range keys {
		ids = append(ids, id)
	}
	config, err := EncryptionConfig(o.StateKeys, ids, o.StateKey, o.StateAcceptPlaintext)
	return config, keys, err
}

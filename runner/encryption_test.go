package runner

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/captf/captf/test/testenv"
)

func TestEncryptionConfig(t *testing.T) {
	for _, tc := range []struct {
		name            string
		ids             []string
		current         string
		acceptPlaintext bool
		want            string
	}{
		{name: "one key, enforced", ids: []string{"k1"}, current: "k1", want: `key_provider "pbkdf2" "k1" {
  passphrase    = file("/keys/k1")
  iterations    = 200000
  hash_function = "sha512"
  key_length    = 32
}

method "aes_gcm" "k1" {
  keys = key_provider.pbkdf2.k1
}

state {
  method   = method.aes_gcm.k1
  enforced = true
}
`},
		{name: "one key, reading a plaintext state", ids: []string{"k1"}, current: "k1", acceptPlaintext: true, want: `key_provider "pbkdf2" "k1" {
  passphrase    = file("/keys/k1")
  iterations    = 200000
  hash_function = "sha512"
  key_length    = 32
}

method "aes_gcm" "k1" {
  keys = key_provider.pbkdf2.k1
}

method "unencrypted" "plaintext" {}

state {
  method   = method.aes_gcm.k1
  enforced = false
  fallback {
    method = method.unencrypted.plaintext
  }
}
`},
		{name: "the other keys fall back in id order", ids: []string{"old", "new", "a"}, current: "new", want: `key_provider "pbkdf2" "new" {
  passphrase    = file("/keys/new")
  iterations    = 200000
  hash_function = "sha512"
  key_length    = 32
}

method "aes_gcm" "new" {
  keys = key_provider.pbkdf2.new
}

key_provider "pbkdf2" "a" {
  passphrase    = file("/keys/a")
  iterations    = 200000
  hash_function = "sha512"
  key_length    = 32
}

method "aes_gcm" "a" {
  keys = key_provider.pbkdf2.a
}

key_provider "pbkdf2" "old" {
  passphrase    = file("/keys/old")
  iterations    = 200000
  hash_function = "sha512"
  key_length    = 32
}

method "aes_gcm" "old" {
  keys = key_provider.pbkdf2.old
}

state {
  method   = method.aes_gcm.new
  enforced = true
  fallback {
    method = method.aes_gcm.a
    fallback {
      method = method.aes_gcm.old
    }
  }
}
`},
		{name: "plaintext is the last fallback", ids: []string{"new", "old"}, current: "new", acceptPlaintext: true, want: `key_provider "pbkdf2" "new" {
  passphrase    = file("/keys/new")
  iterations    = 200000
  hash_function = "sha512"
  key_length    = 32
}

method "aes_gcm" "new" {
  keys = key_provider.pbkdf2.new
}

key_provider "pbkdf2" "old" {
  passphrase    = file("/keys/old")
  iterations    = 200000
  hash_function = "sha512"
  key_length    = 32
}

method "aes_gcm" "old" {
  keys = key_provider.pbkdf2.old
}

method "unencrypted" "plaintext" {}

state {
  method   = method.aes_gcm.new
  enforced = false
  fallback {
    method = method.aes_gcm.old
    fallback {
      method = method.unencrypted.plaintext
    }
  }
}
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := EncryptionConfig("/keys", tc.ids, tc.current, tc.acceptPlaintext)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("EncryptionConfig =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// The key directory is an HCL string: quotes, backslashes and template openings are escaped.
func TestEncryptionConfigQuotesTheKeyDirectory(t *testing.T) {
	got, err := EncryptionConfig(`/k ${x} %{y} "q" \b`, []string{"k1"}, "k1", false)
	if err != nil {
		t.Fatal(err)
	}
	if want := `passphrase    = file("/k $${x} %%{y} \"q\" \\b/k1")`; !strings.Contains(got, want) {
		t.Errorf("EncryptionConfig =\n%s\nwant a line %s", got, want)
	}
}

func TestEncryptionConfigRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		dir     string
		ids     []string
		current string
	}{
		{name: "a relative key directory", dir: "keys", ids: []string{"k1"}, current: "k1"},
		{name: "a control character in the key directory", dir: "/keys\n", ids: []string{"k1"}, current: "k1"},
		{name: "no keys", dir: "/keys", current: "k1"},
		{name: "an id that is no HCL label", dir: "/keys", ids: []string{"k1", "k.2"}, current: "k1"},
		{name: "an id starting with a digit", dir: "/keys", ids: []string{"1k"}, current: "1k"},
		{name: "an id given twice", dir: "/keys", ids: []string{"k1", "k1"}, current: "k1"},
		{name: "a current key not among the keys", dir: "/keys", ids: []string{"k1"}, current: "k2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, err := EncryptionConfig(tc.dir, tc.ids, tc.current, false); err == nil {
				t.Fatalf("EncryptionConfig = %s, want an error", got)
			}
		})
	}
}

// OpenTofu takes the configuration: a plaintext state is encrypted under the current key, a
// rotation rewrites it under the new one, and outputs read back. The key directory's name needs
// quoting, so the test also shows that OpenTofu reads the escaped path.
func TestEncryptionConfigWithOpenTofu(t *testing.T) {
	testenv.RequireBinaries(t, testenv.TofuBinary)
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	tofuBin := filepath.Join(bin, testenv.TofuBinary)
	dir := t.TempDir()
	keys := filepath.Join(dir, `keys ${x} %{y} "q"`)
	module := filepath.Join(dir, "module")
	for _, d := range []string{keys, module} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	write := func(path, data string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(keys, "old"), base64.StdEncoding.EncodeToString([]byte(strings.Repeat("o", 32))))
	write(filepath.Join(keys, "new"), base64.StdEncoding.EncodeToString([]byte(strings.Repeat("n", 32))))
	write(filepath.Join(module, "main.tf"), `resource "terraform_data" "this" {
  input = "hello"
}

output "greeting" {
  value = terraform_data.this.output
}
`)
	tofu := func(config string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, tofuBin, append([]string{"-chdir=" + module}, args...)...)
		cmd.Env = append(os.Environ(), "TF_IN_AUTOMATION=1", "TF_ENCRYPTION="+config)
		out, err := cmd.Output()
		if err != nil {
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				t.Fatalf("tofu %s: %v\n%s%s", strings.Join(args, " "), err, out, exit.Stderr)
			}
			t.Fatalf("tofu %s: %v", strings.Join(args, " "), err)
		}
		return string(out)
	}
	config := func(ids []string, current string, acceptPlaintext bool) string {
		t.Helper()
		c, err := EncryptionConfig(keys, ids, current, acceptPlaintext)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	keyOfState := func() string {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(module, "terraform.tfstate"))
		if err != nil {
			t.Fatal(err)
		}
		var s struct {
			Meta          map[string]string `json:"meta"`
			EncryptedData string            `json:"encrypted_data"`
		}
		if err := json.Unmarshal(data, &s); err != nil {
			t.Fatal(err)
		}
		if s.EncryptedData == "" {
			return ""
		}
		for k := range s.Meta {
			return k
		}
		return "?"
	}
	apply := []string{"apply", "-auto-approve", "-input=false", "-no-color"}

	tofu("", "init", "-input=false", "-no-color")
	tofu("", apply...)
	if k := keyOfState(); k != "" {
		t.Fatalf("the state without encryption has encrypted_data under %s", k)
	}
	tofu(config([]string{"old"}, "old", true), apply...)
	if k := keyOfState(); k != "key_provider.pbkdf2.old" {
		t.Fatalf("after the migration the state's key is %q, want key_provider.pbkdf2.old", k)
	}
	rotated := config([]string{"old", "new"}, "new", false)
	tofu(rotated, apply...)
	if k := keyOfState(); k != "key_provider.pbkdf2.new" {
		t.Fatalf("after the rotation the state's key is %q, want key_provider.pbkdf2.new", k)
	}
	if got := tofu(config([]string{"new"}, "new", false), "output", "-raw", "greeting"); got != "hello" {
		t.Errorf("tofu output greeting = %q, want hello", got)
	}
}

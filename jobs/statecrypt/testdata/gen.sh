#!/bin/sh
# Writes the encrypted state fixtures of statecrypt_test.go with the real OpenTofu of bin/ (`make
# tools` builds it): `go generate ./jobs/statecrypt/` runs it. One lineage goes through what a
# workspace does: a plaintext apply, its migration to key "old", and the rotation to key "new";
# a second state is written under a sha256 key of 24 bytes.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
tofu=${TOFU:-$here/../../../bin/tofu}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export TF_IN_AUTOMATION=1

# Passphrases are read with file(), as the runner reads them; statecrypt_test.go holds the same.
printf '%s' 'old-passphrase-for-tests-0001' > "$work/old"
printf '%s' 'new-passphrase-for-tests-0002' > "$work/new"
printf '%s' 'sha-passphrase-for-tests-0003' > "$work/sha"

mkdir "$work/m"
cat > "$work/m/main.tf" <<'TF'
resource "terraform_data" "this" {
  input = "hello"
}

output "greeting" {
  value = terraform_data.this.output
}
TF

provider() { # id [extra argument lines]
	id=$1
	shift
	printf 'key_provider "pbkdf2" "%s" {\n  passphrase = file("%s/%s")\n  iterations = 200000\n' "$id" "$work" "$id"
	for line in "$@"; do printf '  %s\n' "$line"; done
	printf '}\nmethod "aes_gcm" "%s" {\n  keys = key_provider.pbkdf2.%s\n}\n' "$id" "$id"
}

apply() {
	"$tofu" -chdir="$work/m" apply -auto-approve -input=false -no-color >/dev/null
}

"$tofu" -chdir="$work/m" init -input=false -no-color >/dev/null
TF_ENCRYPTION='' apply
cp "$work/m/terraform.tfstate" "$here/plain.tfstate"

# Migration: a plaintext state is read through the unencrypted fallback and written under "old".
TF_ENCRYPTION="$(provider old)
method \"unencrypted\" \"plaintext\" {}
state {
  method = method.aes_gcm.old
  fallback {
    method = method.unencrypted.plaintext
  }
}" apply
cp "$work/m/terraform.tfstate" "$here/old.tfstate"

# Rotation: the "old" state is read through the fallback and written under "new".
TF_ENCRYPTION="$(provider old)
$(provider new)
state {
  method   = method.aes_gcm.new
  enforced = true
  fallback {
    method = method.aes_gcm.old
  }
}" apply
cp "$work/m/terraform.tfstate" "$here/new.tfstate"

rm -f "$work/m/terraform.tfstate" "$work/m/terraform.tfstate.backup"
TF_ENCRYPTION="$(provider sha 'hash_function = "sha256"' 'key_length = 24')
state {
  method   = method.aes_gcm.sha
  enforced = true
}" apply
cp "$work/m/terraform.tfstate" "$here/sha256.tfstate"

#!/usr/bin/env bash
# Fails when a generated file differs from what `make generate` writes. It regenerates in a copy
# of the tree, so the working tree is never touched.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tar -C "$root" --exclude=./bin --exclude=./.git --exclude=./.local --exclude=./tmp -cf - . | tar -C "$tmp" -xf -
CAPTF_BIN_DIR=${CAPTF_BIN_DIR:-$root/bin} "$tmp/hack/update-codegen.sh" >/dev/null
status=0
for path in apis artifacts/crd; do
  if ! diff -r -q "$root/$path" "$tmp/$path" >/dev/null; then
    diff -r -u "$root/$path" "$tmp/$path" | head -50 || true
    status=1
  fi
done
if [ $status -ne 0 ]; then
  echo "generated files are out of date: run 'make generate' and commit the result" >&2
fi
exit $status

#!/usr/bin/env bash
# Runs every fuzz target of the module for a bounded number of executions each (default 10000x;
# a duration such as 10s works too, but Go before 1.27 may then fail a run at its deadline with
# "context deadline exceeded" having found nothing: go.dev/issue/75804).
set -euo pipefail
fuzztime=${1:-10000x}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
count=0
while IFS=: read -r file name; do
  pkg=./$(dirname "$file")
  echo "fuzz: $pkg $name ($fuzztime)"
  go test -run='^$' -fuzz="^${name}\$" -fuzztime="$fuzztime" "$pkg"
  count=$((count + 1))
done < <(grep -rEo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+' --exclude-dir=bin --exclude-dir=hack . | sed -E 's#^\./##; s#:func #:#' | sort)
echo "fuzz: $count targets run"

#!/usr/bin/env bash
# Runs every fuzz target in the tree for the given time each (default 20s).
set -euo pipefail
t=${1:-20s}
for pkg in $(go list ./...); do
  for f in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
    echo "== $pkg $f"
    go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" "$pkg"
  done
done

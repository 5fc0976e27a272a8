#!/usr/bin/env bash
# Runs the JS client's browser tests (clientjs/browser/, node --test) in
# headless Chromium against a real Herald built from this tree.
#
# Makes sure of, installing what is missing:
#   - Chromium at /usr/bin/chromium (as root: apt-get install chromium;
#     otherwise it fails and says so);
#   - Node.js ≥ 20 (scripts/lib-node.sh);
#   - the npm package playwright-core, pinned, in a cache folder
#     (no browser download: the tests drive Debian's chromium).
# The tests start their own `herald serve` processes on 127.0.0.1 and stop
# them at the end.
set -euo pipefail

log() { echo "test-browser: $*" >&2; }

cd "$(dirname "$0")/.."

# shellcheck source=scripts/lib-node.sh
. scripts/lib-node.sh

CHROMIUM=/usr/bin/chromium
PLAYWRIGHT_VERSION=1.64.1

if [ ! -x "$CHROMIUM" ]; then
  if [ "$(id -u)" != 0 ]; then
    log "$CHROMIUM is missing and installing it needs root: run 'apt-get install chromium' (Debian) as root, then run this again"
    exit 1
  fi
  log "installing chromium with apt-get"
  started=$SECONDS
  export DEBIAN_FRONTEND=noninteractive
  retry apt-get update -qq >/dev/null
  retry apt-get install -y -qq --no-install-recommends chromium >/dev/null
  log "chromium installed in $((SECONDS - started)) s"
fi
if [ ! -x "$CHROMIUM" ]; then
  log "apt-get install chromium did not provide $CHROMIUM"
  exit 1
fi

ensure_node

pw_dir="${XDG_CACHE_HOME:-$HOME/.cache}/herald-playwright"
pw_pkg="$pw_dir/node_modules/playwright-core/package.json"
if [ "$(PW_PKG="$pw_pkg" node -p 'try { require(process.env.PW_PKG).version } catch { "" }')" != "$PLAYWRIGHT_VERSION" ]; then
  command -v npm >/dev/null 2>&1 || { [ "$(id -u)" = 0 ] && apt-get install -y -qq npm >/dev/null; }
  log "installing playwright-core@$PLAYWRIGHT_VERSION from the npm registry into $pw_dir"
  started=$SECONDS
  mkdir -p "$pw_dir"
  # playwright-core downloads no browser on install; PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD makes sure.
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 retry npm install --silent --no-audit --no-fund \
    --prefix "$pw_dir" "playwright-core@$PLAYWRIGHT_VERSION"
  log "playwright-core installed in $((SECONDS - started)) s"
fi

# (node_flags: the example app publishes over WebSocket.)
build_test_herald

cd clientjs
if [ "$#" -eq 0 ]; then set -- browser/*.test.js; fi
HERALD_PLAYWRIGHT_DIR="$pw_dir" HERALD_CHROMIUM="$CHROMIUM" node "${node_flags[@]}" --test "$@"

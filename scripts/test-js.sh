#!/usr/bin/env bash
# Runs the JS client's tests (clientjs/, node --test) against a real Herald
# built from this tree. Makes sure Node.js ≥ 20 is there first (as root it
# installs Debian's nodejs when node is missing), and esbuild and
# typescript, pinned (scripts/lib-node.sh): the tests check that dist/ is
# built from the sources, the sizes, and the types. It also provides the
# oldest Node the client's README names (HERALD_OLDEST_NODE), on which
# test/readme.test.js runs the README's example. The tests start their own
# `herald serve` processes on 127.0.0.1 and stop them at the end.
set -euo pipefail

log() { echo "test-js: $*" >&2; }

cd "$(dirname "$0")/.."

# shellcheck source=scripts/lib-node.sh
. scripts/lib-node.sh
ensure_node
ensure_jstools
ensure_oldest_node

build_test_herald

cd clientjs
# With no files named, node --test would also pick up browser/browser.test.js,
# which needs Chromium and runs through scripts/test-browser.sh instead.
if [ "$#" -eq 0 ]; then set -- test/*.test.js; fi
node "${node_flags[@]}" --test "$@"

#!/usr/bin/env bash
# Herald's webhook handler, in one run on one machine (docs/performance.md,
# "Handlers"): throughput through the Worker beside a bare net/http client
# (loadtest/webhookbench), realtime alone and with a webhook handler
# draining beside it (loadtest/outboxbench -webhook), and one attempt to
# build Convoy to compare with.
#
#   bash scripts/bench-webhook.sh                 # about 3 minutes
#   RECORDS=10000 LATENCY=5s bash scripts/bench-webhook.sh   # a quick look
#
# Each benchmark creates and drops its own database on $DATABASE_URL's
# server; the receivers are child processes answering 204. The reports go
# to $OUT (default bench-webhook-<time>/), one Markdown file each.
set -euo pipefail
cd "$(dirname "$0")/.."

DB=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
RECORDS=${RECORDS:-50000}
LATENCY=${LATENCY:-10s}
CONVOY=${CONVOY:-github.com/frain-dev/convoy/cmd@latest}
OUT=${OUT:-bench-webhook-$(date -u +%Y%m%dT%H%M%SZ)}

mkdir -p "$OUT"
go build -o "$OUT/webhookbench" ./loadtest/webhookbench
go build -o "$OUT/outboxbench" ./loadtest/outboxbench
"$OUT/webhookbench" -database-url "$DB" | tee "$OUT/webhookbench.md"
"$OUT/outboxbench" -database-url "$DB" -phases drain,latency -webhook \
	-records "$RECORDS" -latency-duration "$LATENCY" | tee "$OUT/outboxbench-webhook.md"

# Convoy (a Go module): one attempt, its output kept. It has not built on
# the machines these numbers come from (docs/performance.md says why), so
# driving it (an organisation, a project, an endpoint, events through its
# API, on the same PostgreSQL and Redis) is not scripted.
echo "== Convoy: go install $CONVOY" | tee "$OUT/convoy.md"
if GOBIN="$PWD/$OUT/bin" timeout 600 go install "$CONVOY" >>"$OUT/convoy.md" 2>&1; then
	echo "built: $OUT/bin (running it is not scripted)" | tee -a "$OUT/convoy.md"
else
	echo "not built:" && tail -5 "$OUT/convoy.md"
fi

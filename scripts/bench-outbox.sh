#!/usr/bin/env bash
# Herald's outbox beside Centrifugo v6.9.1's PostgreSQL outbox consumer, in
# one run on one machine, so each target reads as a ratio (docs/performance.md).
#
#   bash scripts/bench-outbox.sh            # about 6 minutes
#   ROUNDS=1 RECORDS=50000 bash scripts/bench-outbox.sh   # a quick look
#
# Centrifugo comes from the Go module proxy into /tmp/cfbin (nothing of it
# enters the repository; cfbench and connbench write its config at run
# time). Every benchmark creates and drops its own database on
# $DATABASE_URL's server, except connbench with Centrifugo, which creates
# and drops an outbox table of its own (connbench_cf_<random>) in
# $DATABASE_URL's database.
# The reports go to $OUT (default bench-<time>/), one Markdown file each.
set -euo pipefail
cd "$(dirname "$0")/.."

CF=${CENTRIFUGO:-/tmp/cfbin/centrifugo}
DB=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
ROUNDS=${ROUNDS:-2}
RECORDS=${RECORDS:-200000}
OUT=${OUT:-bench-$(date -u +%Y%m%dT%H%M%SZ)}

if [ ! -x "$CF" ]; then
	GOBIN=$(dirname "$CF") go install github.com/centrifugal/centrifugo/v6@v6.9.1
fi
mkdir -p "$OUT"
go build -o "$OUT/outboxbench" ./loadtest/outboxbench
go build -o "$OUT/cfbench" ./loadtest/cfbench
go build -o "$OUT/connbench" ./loadtest/connbench
go build -o "$OUT/herald" ./cmd/herald

run() { # name, command...
	local name=$1
	shift
	echo "== $name: $*" >&2
	"$@" >"$OUT/$name.md" 2>"$OUT/$name.log"
}

# Drain (records staged first; staged while the consumer runs), alternating
# Herald and Centrifugo's best configuration (batch 1,000, 4 partitions).
for r in $(seq "$ROUNDS"); do
	run "herald-drain-$r" "$OUT/outboxbench" -database-url "$DB" -phases drain,staged -records "$RECORDS"
	run "centrifugo-drain-$r" "$OUT/cfbench" -database-url "$DB" -centrifugo "$CF" -phases drain,staged -configs 1000x4 -records "$RECORDS"
done
# The same drain with the Redis broker, and beside a transaction holding
# the xmin horizon.
run herald-drain-redis "$OUT/outboxbench" -database-url "$DB" -phases drain,staged -records "$RECORDS" -broker redis
run herald-drain-xmin "$OUT/outboxbench" -database-url "$DB" -phases drain,staged -records "$RECORDS" -hold-xmin

# The drain end to end, as a user sees it: 50,000 records committed at once
# in 4 transactions over 2,000 channels, one subscriber on each (SSE for
# Herald through herald serve, WebSocket for Centrifugo through its outbox
# consumer at its best configuration); first COMMIT → last delivery.
# Alternating, BURST_ROUNDS pairs.
CONNBENCH_BURST=(-publish-via outbox -database-url "$DB" -scenario fanout
	-conns 2000 -channels 2000 -burst "${BURST:-50000}" -producers 4 -drain 60s)
for r in $(seq "${BURST_ROUNDS:-3}"); do
	run "herald-burst-$r" "$OUT/connbench" -server herald -herald-bin "$OUT/herald" -transport sse "${CONNBENCH_BURST[@]}"
	run "centrifugo-burst-$r" "$OUT/connbench" -server centrifugo -centrifugo-bin "$CF" "${CONNBENCH_BURST[@]}"
done

# A steady 1,000 records/s from 16 producers, one record per transaction.
# Commit → client in one harness and one shape for both servers
# (connbench: 5,000 subscribers, each on its own channel, records
# round-robin over the 5,000 channels): Herald through a real herald serve
# and its Worker, Centrifugo through its PostgreSQL outbox consumer at
# cfbench's best (batch 1,000, 4 partitions, pg_notify trigger + LISTEN).
CONNBENCH_LATENCY=(-publish-via outbox -database-url "$DB" -scenario fanout
	-conns 5000 -channels 5000 -rate 1000 -duration 10s -producers 16)
run herald-latency-client "$OUT/connbench" -server herald -herald-bin "$OUT/herald" "${CONNBENCH_LATENCY[@]}"
run centrifugo-latency-client "$OUT/connbench" -server centrifugo -centrifugo-bin "$CF" "${CONNBENCH_LATENCY[@]}"
# Beside them: commit → broker accept and the Worker's PostgreSQL CPU per
# record (outboxbench), and Centrifugo's with one client on 1,000 channels
# (cfbench), which also reads its database's PostgreSQL CPU per record.
run herald-latency "$OUT/outboxbench" -database-url "$DB" -phases latency -latency-duration 10s
run centrifugo-latency-1client "$OUT/cfbench" -database-url "$DB" -centrifugo "$CF" -phases latency

# Producers' commit rate with a consumer running ÷ with none (ABBA):
# Herald's Worker (NOTIFY trigger on) against no consumer and no trigger;
# Centrifugo's consumer in its low-latency shape (per-row pg_notify trigger,
# LISTEN, batch 1,000, 4 partitions) against no consumer and no trigger.
run herald-producers "$OUT/outboxbench" -database-url "$DB" -phases producers -producer-duration 5s
run centrifugo-producers "$OUT/cfbench" -database-url "$DB" -centrifugo "$CF" -phases producers -producer-variants off,consumer,consumer,off

# A business transaction (one business row, one outbox record, one
# commit), 16 producers, no consumer: Herald's staging (its NOTIFY trigger
# installed) against Centrifugo's outbox insert without its trigger (the
# table its best drain configuration polls), alternating.
for r in 1 2; do
	run "herald-business-$r" "$OUT/outboxbench" -database-url "$DB" -phases producers -business -producer-variants none/on -producer-duration 5s
	run "centrifugo-business-$r" "$OUT/cfbench" -database-url "$DB" -centrifugo "$CF" -phases producers -business -producer-variants off
done

# An idle Worker and one at 10 records/s: what PostgreSQL spends.
run herald-idle "$OUT/outboxbench" -database-url "$DB" -phases latency -rate 10 -latency-duration 10s

echo "reports in $OUT/" >&2

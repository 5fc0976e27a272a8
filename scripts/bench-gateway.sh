#!/usr/bin/env bash
# Herald's gateway beside Centrifugo v6.9.1, in one run on one machine, so
# each target reads as a ratio (docs/performance.md, Connections):
#
#   1. idle connections: server RSS per connection, Herald SSE and
#      WebSocket, Centrifugo WebSocket;
#   2. broadcast to SUBS subscribers of one channel at RATE publications/s:
#      deliveries per server CPU-second and latency;
#   3. the same with a tenth of the subscribers stalled (they read nothing
#      until publishing ends): the others' latency, server RSS;
#   4. optional (PARTS=poll): polling against push, Herald alone: the same
#      update stream (POLL_RATE updates/s over 100 channels for DURATION)
#      to POLL_CLIENTS clients, by polling a PostgreSQL-backed endpoint
#      every interval of POLL_INTERVALS and by SSE through the outbox:
#      staleness, server and database CPU, bytes (needs DATABASE_URL).
#
#   bash scripts/bench-gateway.sh                      # about 10 minutes
#   IDLE=5000 SUBS=2000 bash scripts/bench-gateway.sh  # a quick look
#   PARTS="broadcast stalled" bash scripts/bench-gateway.sh
#   PARTS=poll bash scripts/bench-gateway.sh           # polling against push
#
# Everything runs on loopback: connbench starts each server as its own
# child process (herald serve; Centrifugo from the Go module proxy into
# /tmp/cfbin, its config written at run time) and is the only client. The
# reports go to $OUT (default bench-gateway-<time>/), one Markdown file
# each.
set -euo pipefail
cd "$(dirname "$0")/.."

CF=${CENTRIFUGO:-/tmp/cfbin/centrifugo}
IDLE=${IDLE:-19500}
SUBS=${SUBS:-10000}
RATE=${RATE:-5}
DURATION=${DURATION:-30s}
HOLD=${HOLD:-20s}
STALL=${STALL:-$((SUBS / 10))}
PARTS=${PARTS:-idle broadcast stalled}
POLL_CLIENTS=${POLL_CLIENTS:-2000}
POLL_RATE=${POLL_RATE:-20}
POLL_INTERVALS=${POLL_INTERVALS:-1s 5s}
DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}
OUT=${OUT:-bench-gateway-$(date -u +%Y%m%dT%H%M%SZ)}

# One descriptor per connection on each side (server and generator are
# separate processes), plus room for the rest: raise the soft limit up to
# the hard one, which must allow it.
need=$((IDLE > SUBS ? IDLE + 256 : SUBS + 256))
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt "$need" ]; then
	echo "bench-gateway: $need open files needed per process; the hard limit is $hard" >&2
	exit 1
fi
ulimit -Sn "$need"

if [ ! -x "$CF" ]; then
	GOBIN=$(dirname "$CF") go install github.com/centrifugal/centrifugo/v6@v6.9.1
fi
mkdir -p "$OUT"
go build -o "$OUT/connbench" ./loadtest/connbench
go build -o "$OUT/herald" ./cmd/herald

# A run that fails (its delivery check included) is reported and the
# others go on; the script then exits 1.
failed=0
run() { # name, connbench flags...
	local name=$1
	shift
	echo "== $name: connbench $*" >&2
	if ! "$OUT/connbench" "$@" >"$OUT/$name.md" 2>"$OUT/$name.log"; then
		echo "== $name FAILED: $(tail -n 3 "$OUT/$name.log" | tr '\n' ' ')" >&2
		failed=1
	fi
}
herald() { run "$1" -herald-bin "$OUT/herald" "${@:2}"; }
centrifugo() { run "$1" -server centrifugo -centrifugo-bin "$CF" "${@:2}"; }

part() { [[ " $PARTS " == *" $1 "* ]]; }

if part idle; then
	idle=(-scenario idle -conns "$IDLE" -channels 100 -duration "$HOLD")
	herald herald-idle-sse "${idle[@]}" -transport sse
	herald herald-idle-ws "${idle[@]}" -transport ws
	centrifugo centrifugo-idle-ws "${idle[@]}"
fi

bcast=(-scenario broadcast -conns "$SUBS" -rate "$RATE" -duration "$DURATION" -drain 30s)
if part broadcast; then
	herald herald-broadcast-sse "${bcast[@]}" -transport sse
	herald herald-broadcast-ws "${bcast[@]}" -transport ws
	centrifugo centrifugo-broadcast-ws "${bcast[@]}"
fi
if part stalled; then
	herald herald-stalled-sse "${bcast[@]}" -stall "$STALL" -transport sse
	herald herald-stalled-ws "${bcast[@]}" -stall "$STALL" -transport ws
	centrifugo centrifugo-stalled-ws "${bcast[@]}" -stall "$STALL"
fi
if part poll; then
	for every in $POLL_INTERVALS; do
		herald "herald-poll-$every" -scenario poll -database-url "$DATABASE_URL" -conns "$POLL_CLIENTS" \
			-channels 100 -rate "$POLL_RATE" -duration "$DURATION" -poll-interval "$every"
	done
fi

echo "reports in $OUT/" >&2
exit "$failed"

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
# Each broadcast run is also profiled with perf (PERF=0 turns it off): once
# publishing is under way, `perf record -e cpu-clock -g -p <server>` for
# PERF_SECS seconds (the software clock: this machine's virtual CPUs have
# no hardware counters). Its share of samples in the write system call
# (ksys_write, with the loopback receive it includes) splits the run's
# server CPU per delivery into the write and the rest; the rows land in
# $OUT/perf.md, the profiles in $OUT/<run>.perf.txt.
#
#   bash scripts/bench-gateway.sh                      # about 10 minutes
#   IDLE=5000 SUBS=2000 bash scripts/bench-gateway.sh  # a quick look
#   PARTS="broadcast stalled" bash scripts/bench-gateway.sh
#   PARTS=broadcast ROUNDS=3 bash scripts/bench-gateway.sh  # alternating pairs
#   HERALD=/path/to/herald ...                 # that binary instead of a build
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
PERF=${PERF:-1}
PERF_SECS=${PERF_SECS:-12}
ROUNDS=${ROUNDS:-1}
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
if [ -n "${HERALD:-}" ]; then
	cp "$HERALD" "$OUT/herald" # a build of another revision, to compare
else
	go build -o "$OUT/herald" ./cmd/herald
fi

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

# profiled runs connbench like run, and meanwhile profiles its server
# (connbench's child) with perf once publishing is under way.
profiled() { # name, connbench flags...
	local name=$1
	if [ "$PERF" != 1 ]; then
		run "$@"
		return
	fi
	shift
	echo "== $name: connbench $* (profiled)" >&2
	"$OUT/connbench" "$@" >"$OUT/$name.md" 2>"$OUT/$name.log" &
	local cb=$! srv=
	until grep -q "connbench: publishing" "$OUT/$name.log" 2>/dev/null || ! kill -0 "$cb" 2>/dev/null; do
		sleep 0.5
	done
	srv=$(pgrep -P "$cb" | head -n 1 || true)
	if [ -n "$srv" ]; then
		sleep 2 # past the first publications
		perf record -q -e cpu-clock -g -p "$srv" -o "$OUT/$name.perf.data" -- sleep "$PERF_SECS" >/dev/null 2>&1 || true
	fi
	if ! wait "$cb"; then
		echo "== $name FAILED: $(tail -n 3 "$OUT/$name.log" | tr '\n' ' ')" >&2
		failed=1
	fi
	[ -s "$OUT/$name.perf.data" ] && perfrow "$name"
	return 0
}

# perfrow adds name's row to perf.md: the share of its server's samples in
# the write system call, and the run's CPU per delivery split by it.
perfrow() {
	local name=$1 total write rate
	perf report -i "$OUT/$name.perf.data" --children --stdio --sort sym -g none \
		>"$OUT/$name.perf.txt" 2>/dev/null || return 0
	total=$(perf report -i "$OUT/$name.perf.data" --children --stdio -n --sort comm -g none 2>/dev/null |
		awk '$1 ~ /%$/ { s += $3 } END { print s + 0 }')
	write=$(awk '$NF == "ksys_write" { sub("%", "", $1); print $1; exit }' "$OUT/$name.perf.txt")
	rate=$(grep -o '[0-9]* deliveries per server CPU-second' "$OUT/$name.md" | awk '{ print $1; exit }')
	if [ ! -f "$OUT/perf.md" ]; then
		printf '| run | deliveries per server CPU-second | perf samples | share in write | write per delivery | the rest per delivery |\n|---|---|---|---|---|---|\n' >"$OUT/perf.md"
	fi
	awk -v n="$name" -v r="${rate:-0}" -v s="${total:-0}" -v w="${write:-0}" 'BEGIN {
		us = r > 0 ? 1e6 / r : 0
		printf "| %s | %d | %s | %.1f %% | %.2f µs | %.2f µs |\n", n, r, s, w, us * w / 100, us * (1 - w / 100)
	}' >>"$OUT/perf.md"
}

part() { [[ " $PARTS " == *" $1 "* ]]; }

if part idle; then
	idle=(-scenario idle -conns "$IDLE" -channels 100 -duration "$HOLD")
	herald herald-idle-sse "${idle[@]}" -transport sse
	herald herald-idle-ws "${idle[@]}" -transport ws
	centrifugo centrifugo-idle-ws "${idle[@]}"
fi

bcast=(-scenario broadcast -conns "$SUBS" -rate "$RATE" -duration "$DURATION" -drain 30s)
# ROUNDS alternates the servers: Herald SSE, Centrifugo, Herald WebSocket,
# Centrifugo, once per round.
if part broadcast; then
	for ((i = 1; i <= ROUNDS; i++)); do
		sfx=$([ "$ROUNDS" -gt 1 ] && echo "-$i" || true)
		profiled "herald-broadcast-sse$sfx" -herald-bin "$OUT/herald" "${bcast[@]}" -transport sse
		profiled "centrifugo-broadcast-ws$sfx-a" -server centrifugo -centrifugo-bin "$CF" "${bcast[@]}"
		profiled "herald-broadcast-ws$sfx" -herald-bin "$OUT/herald" "${bcast[@]}" -transport ws
		profiled "centrifugo-broadcast-ws$sfx-b" -server centrifugo -centrifugo-bin "$CF" "${bcast[@]}"
	done
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

[ -f "$OUT/perf.md" ] && cat "$OUT/perf.md" >&2
echo "reports in $OUT/" >&2
exit "$failed"

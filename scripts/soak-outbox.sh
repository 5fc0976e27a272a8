#!/usr/bin/env bash
# The outbox's model-based test (outboxfeed/internal/modeltest) as a soak: seed
# after seed, on PostgreSQL (a server of its own, started by the test)
# and on SQLite at once, each for $SOAK, with longer runs than the one
# `make test` does.
#
#   make soak-outbox                      # 10 minutes a store, 600 transactions a run
#   SOAK=1h HERALD_MODEL_OPS=2000 make soak-outbox
#   HERALD_MODEL_SEED=42 SOAK=30m make soak-outbox   # seeds 42, 43, …
#
# Every run logs its seed; the end of the output lists the failing ones.
# Replay one with
#   HERALD_MODEL_SEED=<seed> HERALD_MODEL_OPS=<ops> go test -race -count=1 -run 'TestModel(Postgres|SQLite)$' ./outboxfeed/internal/modeltest/
# The full log (every run's plan and timeline) goes to $SOAK_LOG
# (default soak-outbox-<time>.log). SOAK_RACE= runs without the race
# detector (about 5 times more runs in the same time).
set -euo pipefail
cd "$(dirname "$0")/.."

export HERALD_MODEL_DURATION=${SOAK:-10m}
export HERALD_MODEL_OPS=${HERALD_MODEL_OPS:-600}
LOG=${SOAK_LOG:-soak-outbox-$(date -u +%Y%m%dT%H%M%SZ).log}
RACE=${SOAK_RACE--race}

echo "soak-outbox: $HERALD_MODEL_DURATION a store, $HERALD_MODEL_OPS transactions a run${HERALD_MODEL_SEED:+, from seed $HERALD_MODEL_SEED}; log in $LOG"
status=0
# shellcheck disable=SC2086 # RACE is one flag or none
go test $RACE -count=1 -timeout 0 -v -run '^TestModel(Postgres|SQLite)$' ./outboxfeed/internal/modeltest/ >"$LOG" 2>&1 || status=$?
runs=$(grep -cE '^ +--- (PASS|FAIL): TestModel' "$LOG" || true)
failed=$(grep -cE '^ +--- FAIL: TestModel' "$LOG" || true)
echo "soak-outbox: $runs runs, $failed failed"
grep -E 'failing seeds' "$LOG" || true
if [ "$status" != 0 ] && [ "$failed" = 0 ]; then
	tail -n 40 "$LOG"
fi
exit "$status"

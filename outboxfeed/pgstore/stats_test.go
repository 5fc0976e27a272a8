package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed"
)

// pgStatsByRecord is Stats counted record by record: every record of a
// partition's line (not visible in lo, and not covered by the open range)
// that has no row in the handler's retry queue, plus the pending queue
// rows; the oldest pending over all of them.
const pgStatsByRecord = `
WITH line AS (
	SELECT o.occurred_at FROM herald.outbox_partition p
	CROSS JOIN LATERAL (
		SELECT o.occurred_at, o.seq, o.xid FROM herald.outbox o WHERE o.part = p.part
			AND (o.xid, o.seq) >= (pg_snapshot_xmax(p.lo), 0)
		UNION ALL
		SELECT o.occurred_at, o.seq, o.xid FROM pg_snapshot_xip(p.lo) x(xid)
			CROSS JOIN LATERAL (SELECT * FROM herald.outbox o WHERE o.part = p.part AND o.xid = x.xid) o
	) o
	WHERE (p.hi IS NULL OR NOT pg_visible_in_snapshot(o.xid, p.hi) OR o.seq > p.pos_seq)
		AND NOT EXISTS (SELECT 1 FROM herald.outbox_retry q WHERE q.seq = o.seq AND q.handler = $1)
		AND p.handler = $1
), pending AS (
	SELECT occurred_at FROM line
	UNION ALL
	SELECT occurred_at FROM herald.outbox_retry WHERE state = 'pending' AND handler = $1
)
SELECT (SELECT count(*) FROM pending),
	(SELECT count(*) FROM herald.outbox_retry WHERE dead_lettered_at IS NOT NULL AND handler = $1),
	(SELECT min(occurred_at) FROM pending)`

// Stats gives the numbers of a record-by-record count in the awkward
// cases: transactions in progress at lo, an open range (records visible
// in hi up to pos_seq covered, a transaction in progress at hi not), the
// retry queue (pending, dispatched, dead-lettered, twice for one record,
// another handler's), a queue row whose partition a repartition changed,
// and queued records whose rows left herald.outbox (archived).
func TestPostgresStatsMatchRecordByRecordCount(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	pool := s.Pool()
	exec := func(what, q string, args ...any) {
		t.Helper()
		_, err := pool.Exec(ctx, q, args...)
		testenv.Must(t, err, what)
	}
	// Records of channels c/0 … c/19 (every partition), each with its own
	// occurred_at (older the larger g: the transaction in progress at lo
	// stages the oldest).
	insert := func(tx pgx.Tx, from, to int) {
		t.Helper()
		_, err := tx.Exec(ctx, `INSERT INTO herald.outbox (tenant_id, channel, type, schema_version, payload, occurred_at)
			SELECT 'acme', 'c/' || (g % 20), 'order.updated', 1, jsonb_build_object('g', g),
				timestamptz '2026-01-01' - g * interval '1 second'
			FROM generate_series($1::int, $2::int) g`, from, to)
		testenv.Must(t, err, "insert")
	}
	stageTx := func(from, to int) {
		t.Helper()
		testenv.Must(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { insert(tx, from, to); return nil }), "stage")
	}
	open := func(from, to int) pgx.Tx {
		t.Helper()
		tx, err := pool.Begin(ctx)
		testenv.Must(t, err, "begin")
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		insert(tx, from, to)
		return tx
	}
	snapshot := func() string {
		t.Helper()
		var snap string
		testenv.Must(t, pool.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&snap), "snapshot")
		return snap
	}
	_, err := s.RegisterHandler(ctx, outboxfeed.HandlerSpec{Name: "other", Type: "webhook", Start: outboxfeed.StartRetained})
	testenv.Must(t, err, "register another handler")
	stores := map[string]outboxfeed.Store{"realtime": s, "other": s.ForHandler("other")}
	last := map[string]outboxfeed.Stats{}
	check := func(step string, changes bool) {
		t.Helper()
		changed := false
		for name, st := range stores {
			var want outboxfeed.Stats
			var oldest *time.Time
			testenv.Must(t, pool.QueryRow(ctx, pgStatsByRecord, name).Scan(&want.Pending, &want.DeadLetter, &oldest),
				step+": count record by record")
			if oldest != nil {
				want.OldestPending = *oldest
			}
			got, err := st.Stats(ctx)
			testenv.Must(t, err, step+": stats")
			if got.Pending != want.Pending || got.DeadLetter != want.DeadLetter || !got.OldestPending.Equal(want.OldestPending) {
				t.Fatalf("%s, %s: stats %d pending, %d dead, oldest %v; record by record %d, %d, %v", step, name,
					got.Pending, got.DeadLetter, got.OldestPending, want.Pending, want.DeadLetter, want.OldestPending)
			}
			prev := last[name]
			if got.Pending != prev.Pending || got.DeadLetter != prev.DeadLetter || !got.OldestPending.Equal(prev.OldestPending) {
				changed = true
			}
			last[name] = got
		}
		if changes && !changed {
			t.Fatalf("%s: the numbers did not change (%+v)", step, last)
		}
	}
	queue := func(handler string, g int, state string) {
		t.Helper()
		exec("queue "+state, `INSERT INTO herald.outbox_retry (handler, id, seq, xid, rec_part, part, tenant_id, channel, type,
				schema_version, payload, freshness, occurred_at, kind, state, attempt, next_attempt_at, dispatched_at, dead_lettered_at, last_error)
			SELECT $1, o.id, o.seq, o.xid, o.part, o.part, o.tenant_id, o.channel, o.type, o.schema_version, o.payload, o.freshness,
				o.occurred_at, o.kind, $3, 1, now(),
				CASE WHEN $3 = 'dispatched' THEN now() END,
				CASE WHEN $3 = 'dead_letter' THEN now() END,
				CASE WHEN $3 = 'dead_letter' THEN 'gave up' END
			FROM herald.outbox o WHERE (o.payload->>'g')::int = $2`, handler, g, state)
	}
	check("empty", false)

	// lo: a snapshot taken while one transaction was in progress; records
	// committed before it are covered, its and later ones are not.
	stageTx(1000, 1039)
	inLo := open(7000, 7019)
	stageTx(2500, 2519) // a later xid completes: inLo's is below xmax, in progress
	lo := snapshot()
	testenv.Must(t, inLo.Commit(ctx), "commit the transaction in progress at lo")
	// One partition's lo is taken after that commit: its line holds none
	// of that transaction's records (each partition reads its own list).
	later := snapshot()
	exec("set lo", `UPDATE herald.outbox_partition SET lo = CASE WHEN part = 1 THEN $2 ELSE $1 END::pg_snapshot
		WHERE handler = 'realtime'`, lo, later)
	stageTx(3000, 3039)
	check("lo with a transaction in progress", true)
	var inXip bool
	testenv.Must(t, pool.QueryRow(ctx, `SELECT bool_and(xid IN (SELECT pg_snapshot_xip($1::pg_snapshot)))
		FROM herald.outbox WHERE (payload->>'g')::int BETWEEN 7000 AND 7019`, lo).Scan(&inXip), "xip at lo")
	if !inXip {
		t.Fatalf("lo %s does not list the transaction in progress", lo)
	}
	// A record lo covers, queued: counted once, as queued.
	queue("realtime", 1010, "pending")
	check("a covered record queued", true)

	// Open ranges: hi taken while a transaction was in progress. Partition
	// 0's position is halfway through the records after lo, the others'
	// past all of them.
	inHi := open(4000, 4019)
	stageTx(5000, 5039)
	hi := snapshot()
	testenv.Must(t, inHi.Commit(ctx), "commit the transaction in progress at hi")
	stageTx(6000, 6019)
	var mid, top int64
	testenv.Must(t, pool.QueryRow(ctx, `SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY seq), max(seq)
		FROM herald.outbox WHERE (payload->>'g')::int BETWEEN 5000 AND 5039`).Scan(&mid, &top), "seqs of the range")
	exec("open ranges", `UPDATE herald.outbox_partition SET hi = $1::pg_snapshot,
		pos_seq = CASE WHEN part = (SELECT min(part) FROM herald.outbox_partition) THEN $2::bigint ELSE $3::bigint END
		WHERE handler = 'realtime'`, hi, mid, top)
	check("open ranges", true)

	// The retry queue: a record of the line pending, another dispatched,
	// another dead-lettered, one queued twice (dispatched, then pending
	// again), and one queued for the other handler.
	queue("realtime", 6001, "pending")
	queue("realtime", 6002, "dispatched")
	queue("realtime", 6003, "dead_letter")
	queue("realtime", 4005, "dispatched")
	queue("realtime", 4005, "pending")
	queue("other", 6011, "pending")
	check("retry queue", true)

	// The oldest record of the line dead-lettered: the oldest pending is
	// the next one.
	queue("realtime", 6019, "dead_letter")
	check("the oldest dead-lettered", true)

	// A repartition moved queue rows to another partition; their records
	// stay in theirs, and the numbers stay as they were.
	exec("repartition", `UPDATE herald.outbox_retry SET part = (part + 1) % 4
		WHERE (payload->>'g')::int IN (6001, 4005, 6019, 1010)`)
	queue("realtime", 4003, "pending")
	exec("repartition", `UPDATE herald.outbox_retry SET part = (part + 1) % 4 WHERE (payload->>'g')::int = 4003`)
	check("queue rows moved by a repartition", false)

	// Archived: queued records whose rows left herald.outbox count once,
	// as queued; and a record that left with no queue row no longer counts.
	exec("archive", `DELETE FROM herald.outbox WHERE (payload->>'g')::int IN (6001, 6003, 4005, 6007)`)
	check("records archived", true)
}

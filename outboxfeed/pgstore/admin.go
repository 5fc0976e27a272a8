package pgstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/internal/storekit"

	"github.com/jackc/pgx/v5"
)

// Admin returns the operator interface of the PostgreSQL store.
//
// It reads records through the view herald.outbox_records, which derives
// each record's lifecycle columns from herald.outbox, the partition
// positions (herald.outbox_partition), the batch log and the retry queue
// (herald.outbox_retry). Its writes touch only the retry queue: dead
// letters live there alone, and so do dispatched records that failed
// before they went out. herald.outbox itself is never row-deleted or
// updated here.
func (s *Store) Admin() outboxfeed.Admin { return pgAdmin{s} }

type pgAdmin struct{ s *Store }

func pgTime(t time.Time) any { return t }

// pgAdminRecords is herald.outbox_records with at most one row per record
// (seq), the one Get would return: the view shows a record either from the
// retry queue or from herald.outbox, never both, and normally the queue
// holds one row per record; should it hold more, the latest (highest
// qseq) wins. %s is a WHERE clause (possibly empty) on the view's own
// columns other than the derived state, applied before the
// deduplication; %s is the column list.
const pgAdminRecords = `(SELECT DISTINCT ON (seq) %s FROM herald.outbox_records%s
	ORDER BY seq, qseq DESC NULLS LAST)`

// pgAdminRecordColumns are the view columns List reads (pgRecordColumns
// reads them, qseq only orders the deduplication).
const pgAdminRecordColumns = `id, seq, tenant_id, channel, type, schema_version, payload, freshness,
	occurred_at, kind, state, attempt, next_attempt_at, lease_owner, lease_expires_at, fence,
	last_error, dispatched_at, dead_lettered_at, qseq`

// adminRecords renders pgAdminRecords for the Admin's handler.
func (a pgAdmin) adminRecords(cols, where string) string {
	// A handler's name is [a-z0-9_-] (rules.ValidateHandlerName): it
	// needs no quoting.
	cond := "handler = '" + a.s.handler + "'"
	if where == "" {
		where = " WHERE " + cond
	} else {
		where += " AND " + cond
	}
	return fmt.Sprintf(pgAdminRecords, cols, where)
}

// Stats counts in one read-only snapshot of herald.outbox_records (every
// record once, pending and processing as the partition positions and
// leases make them, the retry queue's rows with their own state).
func (a pgAdmin) Stats(ctx context.Context) (outboxfeed.AdminStats, error) {
	st := storekit.NewAdminStats()
	recs := a.adminRecords("seq, state, kind, type, schema_version, occurred_at", "")
	err := pgx.BeginTxFunc(ctx, a.s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var oldest *time.Time
		err := tx.QueryRow(ctx, `SELECT statement_timestamp(), least(
	(SELECT occurred_at FROM `+recs+` r WHERE state = 'pending' ORDER BY seq LIMIT 1),
	(SELECT min(occurred_at) FROM `+recs+` r WHERE state = 'processing'))`).Scan(&st.Now, &oldest)
		if err != nil {
			return err
		}
		if oldest != nil {
			st.OldestPending = *oldest
			st.OldestPendingAge = max(0, st.Now.Sub(*oldest))
		}
		rows, err := tx.Query(ctx, `SELECT state, kind, count(*) FROM `+recs+` r GROUP BY state, kind`)
		if err != nil {
			return err
		}
		var state, kind string
		var n int64
		_, err = pgx.ForEachRow(rows, []any{&state, &kind, &n}, func() error {
			st.States[state] += n
			st.Kinds[kind] += n
			return nil
		})
		if err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT type, schema_version, count(*) FROM `+recs+` r
WHERE state = 'dead_letter' GROUP BY type, schema_version ORDER BY count(*) DESC, type, schema_version`)
		if err != nil {
			return err
		}
		var tc outboxfeed.TypeCount
		_, err = pgx.ForEachRow(rows, []any{&tc.Type, &tc.SchemaVersion, &tc.Count}, func() error {
			st.DeadLetters = append(st.DeadLetters, tc)
			return nil
		})
		return err
	})
	if err != nil {
		return outboxfeed.AdminStats{}, fmt.Errorf("outboxfeed: admin stats: %w", err)
	}
	return st, nil
}

// List reads one page of herald.outbox_records in seq order, each record
// once. The state (derived by the view) is matched after the
// deduplication, the other selectors before it.
func (a pgAdmin) List(ctx context.Context, f outboxfeed.Filter) (outboxfeed.Page, error) {
	f, err := f.Normalized()
	if err != nil {
		return outboxfeed.Page{}, err
	}
	args := &storekit.SQLArgs{PG: true}
	terms := storekit.Selection{Type: f.Type, SchemaVersion: f.SchemaVersion, Tenant: f.Tenant, Channel: f.Channel, Since: f.Since, Until: f.Until}.Terms(args, pgTime)
	if f.After > 0 {
		terms = append(terms, "seq > "+args.Add(f.After))
	}
	var outer []string
	if f.State != "" {
		outer = append(outer, "state = '"+f.State+"'") // validated: one of the four names
	}
	q := `SELECT ` + pgRecordColumns + ` FROM ` + a.adminRecords(pgAdminRecordColumns, storekit.WhereClause(terms)) + ` r` +
		storekit.WhereClause(outer) + ` ORDER BY seq LIMIT ` + args.Add(f.Limit)
	rows, err := a.s.pool.Query(ctx, q, args.Args...)
	if err != nil {
		return outboxfeed.Page{}, fmt.Errorf("outboxfeed: list: %w", err)
	}
	defer rows.Close()
	var p outboxfeed.Page
	for rows.Next() {
		r, err := scanPGRecord(rows)
		if err != nil {
			return outboxfeed.Page{}, fmt.Errorf("outboxfeed: list: %w", err)
		}
		p.Records = append(p.Records, r)
	}
	if err := rows.Err(); err != nil {
		return outboxfeed.Page{}, fmt.Errorf("outboxfeed: list: %w", err)
	}
	if len(p.Records) == f.Limit {
		p.Next = p.Records[len(p.Records)-1].Seq
	}
	return p, nil
}

// pgReplay moves one batch of selected dead letters of the retry queue
// back to pending and audits each in outbox_replay, in one statement: the
// failure recorded is the last_error the row had when it was locked. A
// replayed row keeps its queue position (qseq), so its channel's later
// records still wait behind it, in the partition the channel maps to now
// (the one it was dead-lettered in may have been retired by a change of
// the partition count since).
const pgReplay = `
WITH picked AS (
	SELECT qseq, last_error FROM herald.outbox_retry
	WHERE %s
	ORDER BY seq, qseq LIMIT %s
	FOR UPDATE
), moved AS (
	UPDATE herald.outbox_retry r
	SET state = 'pending', attempt = 0, next_attempt_at = now(),
	    last_error = NULL, dead_lettered_at = NULL,
	    part = herald.outbox_partition_of(r.tenant_id, r.channel)
	FROM picked WHERE r.qseq = picked.qseq AND r.state = 'dead_letter'
	RETURNING r.id, r.seq, picked.last_error AS failure
), audit AS (
	INSERT INTO herald.outbox_replay (handler, message_id, actor, reason, failure)
	SELECT %s::text, id, %s::text, %s::text, failure FROM moved
)
SELECT id::text, seq FROM moved ORDER BY seq`

// Replay implements Admin. Dead letters live only in the retry queue
// (herald.outbox_retry, state 'dead_letter'); a replayed one becomes a
// pending row of the queue there, with its id and payload, and the next
// claim of its partition picks it up.
func (a pgAdmin) Replay(ctx context.Context, r outboxfeed.ReplayRequest) (outboxfeed.ReplayResult, error) {
	return storekit.Replay(ctx, a, r)
}

// wake tells this process's Workers; those of other processes get the
// NOTIFY the replay statement sends.
func (a pgAdmin) Wake() { a.s.wakeup.Broadcast() }

func (a pgAdmin) ReplayBatch(ctx context.Context, sel storekit.Selection, actor, reason string, after int64, n int) ([]string, int64, error) {
	var ids []string
	var last int64
	err := pgx.BeginFunc(ctx, a.s.pool, func(tx pgx.Tx) error {
		ids, last = ids[:0], 0
		// A change of the partition count (which locks the table in
		// EXCLUSIVE mode) waits for this, or this for it: the mapping read
		// below is the one in force until the commit.
		if _, err := tx.Exec(ctx, `LOCK TABLE herald.outbox_partition IN ROW SHARE MODE`); err != nil {
			return err
		}
		args := &storekit.SQLArgs{PG: true}
		terms := append([]string{storekit.StateTerm(outboxfeed.StateDeadLetter), "handler = " + args.Add(a.s.handler),
			"seq > " + args.Add(after)}, sel.Terms(args, pgTime)...)
		q := fmt.Sprintf(pgReplay, strings.Join(terms, " AND "), args.Add(n), args.Add(a.s.handler), args.Add(actor), args.Add(reason))
		rows, err := tx.Query(ctx, q, args.Args...)
		if err != nil {
			return err
		}
		var id string
		var seq int64
		if _, err := pgx.ForEachRow(rows, []any{&id, &seq}, func() error {
			ids, last = append(ids, id), seq
			return nil
		}); err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		// Delivered at commit; wakes the Workers of every process.
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, '')`, pgNotifyChannel)
		return err
	})
	return ids, last, err
}

// states maps each existing id to its state as Get sees it.
func (a pgAdmin) States(ctx context.Context, ids []string) (map[string]string, error) {
	rows, err := a.s.pool.Query(ctx, `SELECT DISTINCT ON (id) id::text, state FROM herald.outbox_records
WHERE id = ANY($1::uuid[]) AND handler = $2 ORDER BY id, qseq DESC NULLS LAST`, ids, a.s.handler)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(ids))
	var id, state string
	_, err = pgx.ForEachRow(rows, []any{&id, &state}, func() error {
		out[id] = state
		return nil
	})
	return out, err
}

// Purge deletes rows of the retry queue (herald.outbox_retry) in r.State
// whose dispatched_at (dead_lettered_at) is older than the cutoff, in
// batches, each its own short transaction; rows another purger holds are
// skipped, not waited for. PurgeResult.Deleted counts the retry-queue
// rows deleted (with DryRun: that would be).
//
// A purged record's row in herald.outbox, if it still has one, goes in
// the same statement: only records that failed (or were held) once have a
// retry-queue row, so this deletes rows one by one on the failure path
// only. Records that went out without failing live only in herald.outbox
// and leave it by retention of whole segments; they are neither deleted
// nor counted here.
func (a pgAdmin) Purge(ctx context.Context, r outboxfeed.PurgeRequest) (outboxfeed.PurgeResult, error) {
	r, err := r.Normalized()
	if err != nil {
		return outboxfeed.PurgeResult{}, err
	}
	var res outboxfeed.PurgeResult
	err = a.s.pool.QueryRow(ctx, `SELECT statement_timestamp() - $1::bigint * interval '1 microsecond'`,
		r.OlderThan.Microseconds()).Scan(&res.Cutoff)
	if err != nil {
		return res, fmt.Errorf("outboxfeed: purge: %w", err)
	}
	col := storekit.PurgeColumn(r.State)
	args := &storekit.SQLArgs{PG: true}
	terms := []string{storekit.StateTerm(r.State), "handler = " + args.Add(a.s.handler), col + " < " + args.Add(res.Cutoff)}
	if r.Type != "" {
		terms = append(terms, "type = "+args.Add(r.Type))
	}
	if r.SchemaVersion > 0 {
		terms = append(terms, "schema_version = "+args.Add(r.SchemaVersion))
	}
	cond := strings.Join(terms, " AND ")
	if r.DryRun {
		if err := a.s.pool.QueryRow(ctx, `SELECT count(*) FROM herald.outbox_retry WHERE `+cond, args.Args...).Scan(&res.Deleted); err != nil {
			return res, fmt.Errorf("outboxfeed: purge (dry run): %w", err)
		}
		return res, nil
	}
	// The record's row in herald.outbox (or its archive) goes with its retry-queue row
	// (only records that failed once have one), or the view would show it
	// again, as dispatched, until retention drops its segment.
	q := `WITH gone AS (DELETE FROM herald.outbox_retry WHERE qseq IN (SELECT qseq FROM herald.outbox_retry WHERE ` + cond +
		` ORDER BY ` + col + ` LIMIT ` + args.Add(r.BatchSize) + ` FOR UPDATE SKIP LOCKED) RETURNING rec_part, xid, seq),
	mine AS (SELECT g.* FROM gone g WHERE NOT EXISTS (SELECT 1 FROM herald.outbox_handler h WHERE h.name <> ` + args.Add(a.s.handler) + `)),
	rows AS (DELETE FROM herald.outbox o USING mine gone WHERE o.part = gone.rec_part AND o.xid = gone.xid AND o.seq = gone.seq),
	archived AS (DELETE FROM herald.outbox_archive o USING mine gone WHERE o.part = gone.rec_part AND o.xid = gone.xid AND o.seq = gone.seq)
	SELECT count(*) FROM gone`
	for {
		var n int64
		if err := a.s.pool.QueryRow(ctx, q, args.Args...).Scan(&n); err != nil {
			return res, fmt.Errorf("outboxfeed: purge (%d deleted before the error): %w", res.Deleted, err)
		}
		res.Batches++
		res.Deleted += n
		if n < int64(r.BatchSize) {
			break
		}
	}
	if r.State == outboxfeed.StateDispatched && r.Type == "" && r.SchemaVersion == 0 {
		segs, err := a.s.removeSegments(ctx, r.OlderThan, time.Second)
		res.Segments = segs
		if err != nil {
			return res, fmt.Errorf("outboxfeed: purge: remove segments: %w", err)
		}
	}
	return res, nil
}

// Replays reads the audit rows of one message.
func (a pgAdmin) Replays(ctx context.Context, messageID string) ([]outboxfeed.ReplayEntry, error) {
	if !storekit.ValidUUID(messageID) {
		return nil, storekit.Invalid("id %q is not a uuid", messageID)
	}
	rows, err := a.s.pool.Query(ctx, `SELECT handler, message_id::text, actor, reason, replayed_at, failure
FROM herald.outbox_replay WHERE message_id = $1::uuid ORDER BY id`, messageID)
	if err != nil {
		return nil, fmt.Errorf("outboxfeed: replays: %w", err)
	}
	var out []outboxfeed.ReplayEntry
	var e outboxfeed.ReplayEntry
	_, err = pgx.ForEachRow(rows, []any{&e.Handler, &e.MessageID, &e.Actor, &e.Reason, &e.At, &e.Failure}, func() error {
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("outboxfeed: replays: %w", err)
	}
	return out, nil
}

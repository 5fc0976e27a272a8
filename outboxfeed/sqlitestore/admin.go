package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/internal/storekit"
)

// Admin returns the operator interface of the SQLite store, over the
// records of its handler.
func (s *Store) Admin() outboxfeed.Admin { return sqliteAdmin{s} }

type sqliteAdmin struct{ s *Store }

func sqliteTime(t time.Time) any { return t.UnixMicro() }

// jsonInts encodes seqs for json_each.
func jsonInts(v []int64) string {
	b, _ := json.Marshal(v) // a []int64 always encodes
	return string(b)
}

// Stats counts with three queries on the store's one connection; a
// transaction would take the write lock (BEGIN IMMEDIATE) for the scan.
// States are derived (the outbox_record view), so this reads the whole
// outbox.
func (a sqliteAdmin) Stats(ctx context.Context) (outboxfeed.AdminStats, error) {
	st := storekit.NewAdminStats()
	st.Now = time.Now().UTC()
	var pending, dead, oldest int64
	if err := a.s.db.QueryRowContext(ctx, sqliteStats, sqliteNever, a.s.handler).Scan(&pending, &dead, &oldest); err != nil {
		return outboxfeed.AdminStats{}, fmt.Errorf("outboxfeed: admin stats: %w", err)
	}
	if oldest != sqliteNever {
		st.OldestPending = micros(oldest)
		st.OldestPendingAge = max(0, st.Now.Sub(st.OldestPending))
	}
	err := a.each(ctx, `SELECT state, kind, count(*) FROM outbox_record WHERE handler = ? GROUP BY state, kind`, nil, func(rows *sql.Rows) error {
		var state, kind string
		var n int64
		if err := rows.Scan(&state, &kind, &n); err != nil {
			return err
		}
		st.States[state] += n
		st.Kinds[kind] += n
		return nil
	}, a.s.handler)
	if err != nil {
		return outboxfeed.AdminStats{}, fmt.Errorf("outboxfeed: admin stats: %w", err)
	}
	err = a.each(ctx, `SELECT type, schema_version, count(*) FROM outbox_retry WHERE handler = ? AND state = 'dead_letter'
GROUP BY type, schema_version ORDER BY count(*) DESC, type, schema_version`, nil, func(rows *sql.Rows) error {
		var tc outboxfeed.TypeCount
		if err := rows.Scan(&tc.Type, &tc.SchemaVersion, &tc.Count); err != nil {
			return err
		}
		st.DeadLetters = append(st.DeadLetters, tc)
		return nil
	}, a.s.handler)
	if err != nil {
		return outboxfeed.AdminStats{}, fmt.Errorf("outboxfeed: admin stats: %w", err)
	}
	return st, nil
}

// queryer is a *sql.DB or a *sql.Tx.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// each runs q on the store (or on tx when given) and calls fn per row.
func (a sqliteAdmin) each(ctx context.Context, q string, tx *sql.Tx, fn func(*sql.Rows) error, args ...any) error {
	var db queryer = a.s.db
	if tx != nil {
		db = tx
	}
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// List reads one page in seq order.
func (a sqliteAdmin) List(ctx context.Context, f outboxfeed.Filter) (outboxfeed.Page, error) {
	f, err := f.Normalized()
	if err != nil {
		return outboxfeed.Page{}, err
	}
	args := &storekit.SQLArgs{}
	terms := []string{"handler = " + args.Add(a.s.handler)}
	terms = append(terms, storekit.Selection{Type: f.Type, SchemaVersion: f.SchemaVersion, Tenant: f.Tenant, Channel: f.Channel, Since: f.Since, Until: f.Until}.Terms(args, sqliteTime)...)
	if f.State != "" {
		terms = append(terms, "state = '"+f.State+"'") // validated: a literal
	}
	if f.After > 0 {
		terms = append(terms, "seq > "+args.Add(f.After))
	}
	q := `SELECT ` + sqliteRecordColumns + ` FROM outbox_record` + storekit.WhereClause(terms) + ` ORDER BY seq LIMIT ` + args.Add(f.Limit)
	var p outboxfeed.Page
	err = a.each(ctx, q, nil, func(rows *sql.Rows) error {
		r, err := scanSQLiteRecord(rows)
		if err != nil {
			return err
		}
		p.Records = append(p.Records, r)
		return nil
	}, args.Args...)
	if err != nil {
		return outboxfeed.Page{}, fmt.Errorf("outboxfeed: list: %w", err)
	}
	if len(p.Records) == f.Limit {
		p.Next = p.Records[len(p.Records)-1].Seq
	}
	return p, nil
}

// Replay implements Admin.
func (a sqliteAdmin) Replay(ctx context.Context, r outboxfeed.ReplayRequest) (outboxfeed.ReplayResult, error) {
	return storekit.Replay(ctx, a, r)
}

// wake tells this process's Workers; those of other processes find the
// replayed records by polling.
func (a sqliteAdmin) Wake() { a.s.wakeup.Broadcast() }

// states returns the state of each existing id.
func (a sqliteAdmin) States(ctx context.Context, ids []string) (map[string]string, error) {
	states := make(map[string]string, len(ids))
	err := a.each(ctx, `SELECT id, state FROM outbox_record WHERE handler = ? AND id IN (SELECT value FROM json_each(?))`, nil,
		func(rows *sql.Rows) error {
			var id, state string
			if err := rows.Scan(&id, &state); err != nil {
				return err
			}
			states[id] = state
			return nil
		}, a.s.handler, storekit.JSONStrings(ids))
	return states, err
}

// replayBatch moves up to n selected dead letters after seq `after` back
// to pending in one BEGIN IMMEDIATE transaction, auditing each first. A
// dead letter is a queue row: replayed, it is due at once and keeps its
// place (qseq) in its channel's queue.
func (a sqliteAdmin) ReplayBatch(ctx context.Context, sel storekit.Selection, actor, reason string, after int64, n int) ([]string, int64, error) {
	tx, err := a.s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = tx.Rollback() }()
	args := &storekit.SQLArgs{}
	terms := append([]string{"handler = " + args.Add(a.s.handler), "state = 'dead_letter'", "rec_seq > " + args.Add(after)},
		sel.Terms(args, sqliteTime)...)
	q := `SELECT rec_seq, id FROM outbox_retry WHERE ` + strings.Join(terms, " AND ") + ` ORDER BY rec_seq LIMIT ` + args.Add(n)
	var ids []string
	var seqs []int64
	err = a.each(ctx, q, tx, func(rows *sql.Rows) error {
		var seq int64
		var id string
		if err := rows.Scan(&seq, &id); err != nil {
			return err
		}
		seqs, ids = append(seqs, seq), append(ids, id)
		return nil
	}, args.Args...)
	if err != nil || len(ids) == 0 {
		return nil, 0, err
	}
	picked := jsonInts(seqs)
	now := time.Now().UnixMicro()
	if _, err := tx.ExecContext(ctx, `INSERT INTO outbox_replay (handler, message_id, actor, reason, replayed_at, failure)
SELECT handler, id, ?2, ?3, ?4, last_error FROM outbox_retry
WHERE handler = ?1 AND state = 'dead_letter' AND rec_seq IN (SELECT value FROM json_each(?5)) ORDER BY rec_seq`,
		a.s.handler, actor, reason, now, picked); err != nil {
		return nil, 0, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE outbox_retry
SET state = 'pending', attempt = 0, next_attempt_at = ?2, last_error = NULL, dead_lettered_at = NULL
WHERE handler = ?1 AND state = 'dead_letter' AND rec_seq IN (SELECT value FROM json_each(?3))`, a.s.handler, now, picked); err != nil {
		return nil, 0, err
	}
	if err := tx.Commit(); err != nil {
		return nil, 0, err
	}
	return ids, seqs[len(seqs)-1], nil
}

// sqlitePurgeBound is the highest seq a purge of records read from
// handler ?2's position may reach: the partition's position when its last
// completion is older than the cutoff (?1), else the end of the last batch
// logged before it.
const sqlitePurgeBound = `
SELECT CASE WHEN p.done_at < ?1 THEN p.pos
	ELSE coalesce((SELECT max(b.to_seq) FROM outbox_batch b WHERE b.handler = p.handler AND b.part = 0 AND b.done_at < ?1), 0) END
FROM outbox_partition p WHERE p.handler = ?2 AND p.part = 0`

// sqliteBatchTrim drops handler ?1's logged batches that end before the
// first outbox row: they cover nothing any more.
const sqliteBatchTrim = `
DELETE FROM outbox_batch WHERE handler = ?1 AND part = 0 AND to_seq < coalesce((SELECT min(seq) FROM outbox),
	(SELECT pos + 1 FROM outbox_partition WHERE handler = ?1 AND part = 0))`

// sqliteOthers reports whether a handler other than ?1 exists: then a
// purge leaves the outbox rows, which the others may still need.
const sqliteOthers = `SELECT EXISTS (SELECT 1 FROM outbox_handler WHERE name <> ?1)`

// sqlitePurge is one purge of the handler's records: the rows of its
// retry queue in the state, older than the cutoff, and (dispatched only)
// the records at or below its position without a queue row, dispatched by
// a batch done before the cutoff. A queue row goes with its outbox row:
// left alone, the outbox row would be read again (above the position) or
// seen as dispatched. When other handlers exist, the outbox rows stay
// (they may still be theirs to deliver): the handler's queue rows go, and
// the records read from its position go once every other handler's
// position has passed them too and none keeps a queue row of them.
type sqlitePurge struct {
	r       outboxfeed.PurgeRequest
	handler string
	cutoff  int64
}

// queueCond selects the queue rows to purge.
func (p sqlitePurge) queueCond(args *storekit.SQLArgs) string {
	cond := "handler = " + args.Add(p.handler) + " AND state = '" + p.r.State + "' AND " +
		storekit.PurgeColumn(p.r.State) + " < " + args.Add(p.cutoff)
	return cond + p.typeCond(args)
}

// others reports whether a handler other than p's exists.
func (p sqlitePurge) others(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}) (bool, error) {
	var others bool
	err := q.QueryRowContext(ctx, sqliteOthers, p.handler).Scan(&others)
	return others, err
}

func (p sqlitePurge) typeCond(args *storekit.SQLArgs) string {
	cond := ""
	if p.r.Type != "" {
		cond += " AND type = " + args.Add(p.r.Type)
	}
	if p.r.SchemaVersion > 0 {
		cond += " AND schema_version = " + args.Add(p.r.SchemaVersion)
	}
	return cond
}

// rangeCond selects the records read from the position to purge, with
// seq in (after, bound].
func (p sqlitePurge) rangeCond(args *storekit.SQLArgs, after, bound int64) string {
	// Each "?" is a parameter of its own: the handler is added at each use.
	return "o.seq > " + args.Add(after) + " AND o.seq <= " + args.Add(bound) +
		" AND o.seq <= (SELECT pos FROM outbox_partition WHERE handler = " + args.Add(p.handler) + " AND part = 0)" +
		" AND " + sqliteUnqueued(args.Add(p.handler)) +
		" AND coalesce((SELECT b.done_at FROM outbox_batch b WHERE b.handler = " + args.Add(p.handler) +
		" AND b.part = 0 AND b.to_seq >= o.seq ORDER BY b.to_seq LIMIT 1)," +
		" (SELECT done_at FROM outbox_partition WHERE handler = " + args.Add(p.handler) + " AND part = 0)) < " + args.Add(p.cutoff) +
		// Every other handler is done with it too: its position passed
		// the record and it keeps no queue row of it.
		" AND NOT EXISTS (SELECT 1 FROM outbox_partition x WHERE x.part = 0 AND x.handler <> " + args.Add(p.handler) + " AND x.pos < o.seq)" +
		" AND NOT EXISTS (SELECT 1 FROM outbox_handler h WHERE h.name <> " + args.Add(p.handler) +
		" AND EXISTS (SELECT 1 FROM outbox_retry x WHERE x.handler = h.name AND x.rec_seq = o.seq))" + p.typeCond(args)
}

// Purge deletes in batches, each its own transaction, so Workers and
// producers get the write lock between batches.
func (a sqliteAdmin) Purge(ctx context.Context, r outboxfeed.PurgeRequest) (outboxfeed.PurgeResult, error) {
	r, err := r.Normalized()
	if err != nil {
		return outboxfeed.PurgeResult{}, err
	}
	res := outboxfeed.PurgeResult{Cutoff: time.Now().Add(-r.OlderThan).UTC()}
	p := sqlitePurge{r: r, handler: a.s.handler, cutoff: res.Cutoff.UnixMicro()}
	if r.DryRun {
		n, err := p.count(ctx, a.s.db)
		if err != nil {
			return res, fmt.Errorf("outboxfeed: purge (dry run): %w", err)
		}
		res.Deleted = n
		return res, nil
	}
	var after int64 // records read from the position: the last seq looked at
	for {
		var n int64
		err := a.s.inTx(ctx, func(tx *sql.Tx) error {
			var err error
			n, after, err = p.batch(ctx, a, tx, after)
			return err
		})
		if err != nil {
			return res, fmt.Errorf("outboxfeed: purge (%d deleted before the error): %w", res.Deleted, err)
		}
		res.Batches++
		res.Deleted += n
		if n < int64(r.BatchSize) {
			return res, nil
		}
	}
}

// count counts what a purge would delete.
func (p sqlitePurge) count(ctx context.Context, db *sql.DB) (int64, error) {
	args := &storekit.SQLArgs{}
	var queued int64
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM outbox_retry WHERE `+p.queueCond(args), args.Args...).Scan(&queued); err != nil {
		return 0, err
	}
	if p.r.State != outboxfeed.StateDispatched {
		return queued, nil
	}
	var bound int64
	if err := db.QueryRowContext(ctx, sqlitePurgeBound, p.cutoff, p.handler).Scan(&bound); err != nil {
		return 0, err
	}
	args = &storekit.SQLArgs{}
	var ranged int64
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM outbox o WHERE `+p.rangeCond(args, 0, bound), args.Args...).Scan(&ranged)
	return queued + ranged, err
}

// batch deletes up to BatchSize records, queue rows first (oldest first),
// then records read from the position past seq after (in seq order). It
// returns how many it deleted and the new after.
func (p sqlitePurge) batch(ctx context.Context, a sqliteAdmin, tx *sql.Tx, after int64) (int64, int64, error) {
	n := p.r.BatchSize
	args := &storekit.SQLArgs{}
	q := `SELECT qseq, rec_seq FROM outbox_retry INDEXED BY outbox_retry_` + p.r.State + `_idx WHERE ` + p.queueCond(args) +
		` ORDER BY ` + storekit.PurgeColumn(p.r.State) + ` LIMIT ` + args.Add(n)
	var qseqs, recs []int64
	err := a.each(ctx, q, tx, func(rows *sql.Rows) error {
		var qs, rs int64
		if err := rows.Scan(&qs, &rs); err != nil {
			return err
		}
		qseqs, recs = append(qseqs, qs), append(recs, rs)
		return nil
	}, args.Args...)
	if err != nil {
		return 0, after, err
	}
	others, err := p.others(ctx, tx)
	if err != nil {
		return 0, after, err
	}
	deleted := int64(len(qseqs))
	if len(qseqs) > 0 && !others {
		if _, err := tx.ExecContext(ctx, `DELETE FROM outbox WHERE seq IN (SELECT value FROM json_each(?))`, jsonInts(recs)); err != nil {
			return 0, after, err
		}
	}
	if len(qseqs) > 0 {
		if _, err := tx.ExecContext(ctx, `DELETE FROM outbox_retry WHERE qseq IN (SELECT value FROM json_each(?))`, jsonInts(qseqs)); err != nil {
			return 0, after, err
		}
	}
	if p.r.State == outboxfeed.StateDispatched && len(qseqs) < n {
		var bound int64
		if err := tx.QueryRowContext(ctx, sqlitePurgeBound, p.cutoff, p.handler).Scan(&bound); err != nil {
			return 0, after, err
		}
		args := &storekit.SQLArgs{}
		q := `SELECT o.seq FROM outbox o WHERE ` + p.rangeCond(args, after, bound) + ` ORDER BY o.seq LIMIT ` + args.Add(n-len(qseqs))
		var seqs []int64
		err := a.each(ctx, q, tx, func(rows *sql.Rows) error {
			var s int64
			if err := rows.Scan(&s); err != nil {
				return err
			}
			seqs = append(seqs, s)
			return nil
		}, args.Args...)
		if err != nil {
			return 0, after, err
		}
		if len(seqs) > 0 {
			if _, err := tx.ExecContext(ctx, `DELETE FROM outbox WHERE seq IN (SELECT value FROM json_each(?))`, jsonInts(seqs)); err != nil {
				return 0, after, err
			}
			after = seqs[len(seqs)-1]
			deleted += int64(len(seqs))
		}
	}
	if _, err := tx.ExecContext(ctx, sqliteBatchTrim, p.handler); err != nil {
		return 0, after, err
	}
	return deleted, after, nil
}

// Replays reads the audit rows of one message.
func (a sqliteAdmin) Replays(ctx context.Context, messageID string) ([]outboxfeed.ReplayEntry, error) {
	if messageID == "" {
		return nil, storekit.Invalid("empty id")
	}
	id, err := storekit.CanonicalID(messageID)
	if err != nil {
		return nil, storekit.Invalid("id %q is not a uuid", messageID)
	}
	var out []outboxfeed.ReplayEntry
	err = a.each(ctx, `SELECT handler, message_id, actor, reason, replayed_at, failure FROM outbox_replay
WHERE message_id = ? ORDER BY id`, nil, func(rows *sql.Rows) error {
		var e outboxfeed.ReplayEntry
		var at int64
		if err := rows.Scan(&e.Handler, &e.MessageID, &e.Actor, &e.Reason, &at, &e.Failure); err != nil {
			return err
		}
		e.At = micros(at)
		out = append(out, e)
		return nil
	}, id)
	if err != nil {
		return nil, fmt.Errorf("outboxfeed: replays: %w", err)
	}
	return out, nil
}

// Partitions lists the embedded store's one partition, as the handler
// consumes it.
func (a sqliteAdmin) Partitions(ctx context.Context) ([]outboxfeed.PartitionInfo, error) {
	var p outboxfeed.PartitionInfo
	var owner sql.NullString
	var exp, done sql.NullInt64
	var batches int64
	err := a.s.db.QueryRowContext(ctx, `SELECT part, owner, expires_at, fence, claim_to IS NOT NULL, takeovers, done_at,
	(SELECT count(*) FROM outbox_batch b WHERE b.handler = p.handler) FROM outbox_partition p WHERE p.handler = ? AND p.part = 0`, a.s.handler).
		Scan(&p.Partition, &owner, &exp, &p.Fence, &p.Open, &p.Takeovers, &done, &batches)
	if err != nil {
		return nil, fmt.Errorf("outboxfeed: partitions: %w", err)
	}
	p.State, p.Owner, p.Batches = "active", owner.String, batches
	if exp.Valid {
		p.ExpiresAt = time.UnixMicro(exp.Int64).UTC()
	}
	if done.Valid {
		p.DoneAt = time.UnixMicro(done.Int64).UTC()
	}
	return []outboxfeed.PartitionInfo{p}, nil
}

// SetPartitions is refused: the embedded store has one writer and one
// partition, whose position by insertion order is exact.
func (a sqliteAdmin) SetPartitions(ctx context.Context, n int) error {
	if n == 1 {
		return nil
	}
	return storekit.Invalid("the embedded SQLite store has one partition; only PostgreSQL can have %d", n)
}

// ResetAfterRestore is refused: the embedded store's position is a seq,
// which a copy of the file keeps exact.
func (a sqliteAdmin) ResetAfterRestore(ctx context.Context) (outboxfeed.ResetResult, error) {
	return outboxfeed.ResetResult{}, storekit.Invalid("the embedded SQLite store's position is a record number, exact in any copy of its file: there is nothing to reset")
}

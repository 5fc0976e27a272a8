package outboxfeed

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Admin returns the operator interface of the SQLite store.
func (s *SQLiteStore) Admin() Admin { return sqliteAdmin{s} }

type sqliteAdmin struct{ s *SQLiteStore }

func sqliteTime(t time.Time) any { return t.UnixMicro() }

// jsonStrings encodes ids for json_each.
func jsonStrings(v []string) string {
	b, _ := json.Marshal(v) // a []string always encodes
	return string(b)
}

func jsonInts(v []int64) string {
	b, _ := json.Marshal(v) // a []int64 always encodes
	return string(b)
}

// Stats counts with three queries on the store's one connection; a
// transaction would take the write lock (BEGIN IMMEDIATE) for the scan.
// States are derived (the outbox_record view), so this reads the whole
// outbox.
func (a sqliteAdmin) Stats(ctx context.Context) (AdminStats, error) {
	st := newAdminStats()
	st.Now = time.Now().UTC()
	var pending, dead, oldest int64
	if err := a.s.db.QueryRowContext(ctx, sqliteStats, sqliteNever).Scan(&pending, &dead, &oldest); err != nil {
		return AdminStats{}, fmt.Errorf("outboxfeed: admin stats: %w", err)
	}
	if oldest != sqliteNever {
		st.OldestPending = micros(oldest)
		st.OldestPendingAge = max(0, st.Now.Sub(st.OldestPending))
	}
	err := a.each(ctx, `SELECT state, kind, count(*) FROM outbox_record GROUP BY state, kind`, nil, func(rows *sql.Rows) error {
		var state, kind string
		var n int64
		if err := rows.Scan(&state, &kind, &n); err != nil {
			return err
		}
		st.States[state] += n
		st.Kinds[kind] += n
		return nil
	})
	if err != nil {
		return AdminStats{}, fmt.Errorf("outboxfeed: admin stats: %w", err)
	}
	err = a.each(ctx, `SELECT type, schema_version, count(*) FROM outbox_retry WHERE state = 'dead_letter'
GROUP BY type, schema_version ORDER BY count(*) DESC, type, schema_version`, nil, func(rows *sql.Rows) error {
		var tc TypeCount
		if err := rows.Scan(&tc.Type, &tc.SchemaVersion, &tc.Count); err != nil {
			return err
		}
		st.DeadLetters = append(st.DeadLetters, tc)
		return nil
	})
	if err != nil {
		return AdminStats{}, fmt.Errorf("outboxfeed: admin stats: %w", err)
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
func (a sqliteAdmin) List(ctx context.Context, f Filter) (Page, error) {
	f = f.withDefaults()
	if err := f.validate(); err != nil {
		return Page{}, err
	}
	args := &sqlArgs{}
	terms := selection{typ: f.Type, schemaVersion: f.SchemaVersion, tenant: f.Tenant, channel: f.Channel, since: f.Since, until: f.Until}.terms(args, sqliteTime)
	if f.State != "" {
		terms = append(terms, "state = '"+f.State+"'") // validated: a literal
	}
	if f.After > 0 {
		terms = append(terms, "seq > "+args.add(f.After))
	}
	q := `SELECT ` + sqliteRecordColumns + ` FROM outbox_record` + whereClause(terms) + ` ORDER BY seq LIMIT ` + args.add(f.Limit)
	var p Page
	err := a.each(ctx, q, nil, func(rows *sql.Rows) error {
		r, err := scanSQLiteRecord(rows)
		if err != nil {
			return err
		}
		p.Records = append(p.Records, r)
		return nil
	}, args.args...)
	if err != nil {
		return Page{}, fmt.Errorf("outboxfeed: list: %w", err)
	}
	if len(p.Records) == f.Limit {
		p.Next = p.Records[len(p.Records)-1].Seq
	}
	return p, nil
}

// Replay implements Admin.
func (a sqliteAdmin) Replay(ctx context.Context, r ReplayRequest) (ReplayResult, error) {
	return replay(ctx, a, r)
}

// wake tells this process's Workers; those of other processes find the
// replayed records by polling.
func (a sqliteAdmin) wake() { a.s.wakeup.broadcast() }

// states returns the state of each existing id.
func (a sqliteAdmin) states(ctx context.Context, ids []string) (map[string]string, error) {
	states := make(map[string]string, len(ids))
	err := a.each(ctx, `SELECT id, state FROM outbox_record WHERE id IN (SELECT value FROM json_each(?))`, nil,
		func(rows *sql.Rows) error {
			var id, state string
			if err := rows.Scan(&id, &state); err != nil {
				return err
			}
			states[id] = state
			return nil
		}, jsonStrings(ids))
	return states, err
}

// replayBatch moves up to n selected dead letters after seq `after` back
// to pending in one BEGIN IMMEDIATE transaction, auditing each first. A
// dead letter is a queue row: replayed, it is due at once and keeps its
// place (qseq) in its channel's queue.
func (a sqliteAdmin) replayBatch(ctx context.Context, sel selection, actor, reason string, after int64, n int) ([]string, int64, error) {
	tx, err := a.s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = tx.Rollback() }()
	args := &sqlArgs{}
	terms := append([]string{"state = 'dead_letter'", "rec_seq > " + args.add(after)}, sel.terms(args, sqliteTime)...)
	q := `SELECT rec_seq, id FROM outbox_retry WHERE ` + strings.Join(terms, " AND ") + ` ORDER BY rec_seq LIMIT ` + args.add(n)
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
	}, args.args...)
	if err != nil || len(ids) == 0 {
		return nil, 0, err
	}
	picked := jsonInts(seqs)
	now := time.Now().UnixMicro()
	if _, err := tx.ExecContext(ctx, `INSERT INTO outbox_replay (message_id, actor, reason, replayed_at, failure)
SELECT id, ?, ?, ?, last_error FROM outbox_retry
WHERE state = 'dead_letter' AND rec_seq IN (SELECT value FROM json_each(?)) ORDER BY rec_seq`,
		actor, reason, now, picked); err != nil {
		return nil, 0, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE outbox_retry
SET state = 'pending', attempt = 0, next_attempt_at = ?, last_error = NULL, dead_lettered_at = NULL
WHERE state = 'dead_letter' AND rec_seq IN (SELECT value FROM json_each(?))`, now, picked); err != nil {
		return nil, 0, err
	}
	if err := tx.Commit(); err != nil {
		return nil, 0, err
	}
	return ids, seqs[len(seqs)-1], nil
}

// sqlitePurgeBound is the highest seq a purge of records read from the
// position may reach: the partition's position when its last completion
// is older than the cutoff (?1), else the end of the last batch logged
// before it.
const sqlitePurgeBound = `
SELECT CASE WHEN p.done_at < ?1 THEN p.pos
	ELSE coalesce((SELECT max(b.to_seq) FROM outbox_batch b WHERE b.part = 0 AND b.done_at < ?1), 0) END
FROM outbox_partition p WHERE p.part = 0`

// sqliteBatchTrim drops the logged batches that end before the first
// outbox row: they cover nothing any more.
const sqliteBatchTrim = `
DELETE FROM outbox_batch WHERE part = 0 AND to_seq < coalesce((SELECT min(seq) FROM outbox),
	(SELECT pos + 1 FROM outbox_partition WHERE part = 0))`

// sqlitePurge is one purge: the rows of the retry queue in the state,
// older than the cutoff, and (dispatched only) the records at or below the
// position without a queue row, dispatched by a batch done before the
// cutoff. A queue row goes with its outbox row: left alone, the outbox row
// would be read again (above the position) or seen as dispatched.
type sqlitePurge struct {
	r      PurgeRequest
	cutoff int64
}

// queueCond selects the queue rows to purge.
func (p sqlitePurge) queueCond(args *sqlArgs) string {
	cond := "state = '" + p.r.State + "' AND " + purgeColumn(p.r.State) + " < " + args.add(p.cutoff)
	return cond + p.typeCond(args)
}

func (p sqlitePurge) typeCond(args *sqlArgs) string {
	cond := ""
	if p.r.Type != "" {
		cond += " AND type = " + args.add(p.r.Type)
	}
	if p.r.SchemaVersion > 0 {
		cond += " AND schema_version = " + args.add(p.r.SchemaVersion)
	}
	return cond
}

// rangeCond selects the records read from the position to purge, with
// seq in (after, bound].
func (p sqlitePurge) rangeCond(args *sqlArgs, after, bound int64) string {
	return "o.seq > " + args.add(after) + " AND o.seq <= " + args.add(bound) +
		" AND o.seq <= (SELECT pos FROM outbox_partition WHERE part = 0) AND " + sqliteUnqueued +
		" AND coalesce((SELECT b.done_at FROM outbox_batch b WHERE b.part = 0 AND b.to_seq >= o.seq ORDER BY b.to_seq LIMIT 1)," +
		" (SELECT done_at FROM outbox_partition WHERE part = 0)) < " + args.add(p.cutoff) + p.typeCond(args)
}

// Purge deletes in batches, each its own transaction, so Workers and
// producers get the write lock between batches.
func (a sqliteAdmin) Purge(ctx context.Context, r PurgeRequest) (PurgeResult, error) {
	r = r.withDefaults()
	if err := r.validate(); err != nil {
		return PurgeResult{}, err
	}
	res := PurgeResult{Cutoff: time.Now().Add(-r.OlderThan).UTC()}
	p := sqlitePurge{r: r, cutoff: res.Cutoff.UnixMicro()}
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
	args := &sqlArgs{}
	var queued int64
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM outbox_retry WHERE `+p.queueCond(args), args.args...).Scan(&queued); err != nil {
		return 0, err
	}
	if p.r.State != StateDispatched {
		return queued, nil
	}
	var bound int64
	if err := db.QueryRowContext(ctx, sqlitePurgeBound, p.cutoff).Scan(&bound); err != nil {
		return 0, err
	}
	args = &sqlArgs{}
	var ranged int64
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM outbox o WHERE `+p.rangeCond(args, 0, bound), args.args...).Scan(&ranged)
	return queued + ranged, err
}

// batch deletes up to BatchSize records, queue rows first (oldest first),
// then records read from the position past seq after (in seq order). It
// returns how many it deleted and the new after.
func (p sqlitePurge) batch(ctx context.Context, a sqliteAdmin, tx *sql.Tx, after int64) (int64, int64, error) {
	n := p.r.BatchSize
	args := &sqlArgs{}
	q := `SELECT qseq, rec_seq FROM outbox_retry INDEXED BY outbox_retry_` + p.r.State + `_idx WHERE ` + p.queueCond(args) +
		` ORDER BY ` + purgeColumn(p.r.State) + ` LIMIT ` + args.add(n)
	var qseqs, recs []int64
	err := a.each(ctx, q, tx, func(rows *sql.Rows) error {
		var qs, rs int64
		if err := rows.Scan(&qs, &rs); err != nil {
			return err
		}
		qseqs, recs = append(qseqs, qs), append(recs, rs)
		return nil
	}, args.args...)
	if err != nil {
		return 0, after, err
	}
	deleted := int64(len(qseqs))
	if len(qseqs) > 0 {
		if _, err := tx.ExecContext(ctx, `DELETE FROM outbox WHERE seq IN (SELECT value FROM json_each(?))`, jsonInts(recs)); err != nil {
			return 0, after, err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM outbox_retry WHERE qseq IN (SELECT value FROM json_each(?))`, jsonInts(qseqs)); err != nil {
			return 0, after, err
		}
	}
	if p.r.State == StateDispatched && len(qseqs) < n {
		var bound int64
		if err := tx.QueryRowContext(ctx, sqlitePurgeBound, p.cutoff).Scan(&bound); err != nil {
			return 0, after, err
		}
		args := &sqlArgs{}
		q := `SELECT o.seq FROM outbox o WHERE ` + p.rangeCond(args, after, bound) + ` ORDER BY o.seq LIMIT ` + args.add(n-len(qseqs))
		var seqs []int64
		err := a.each(ctx, q, tx, func(rows *sql.Rows) error {
			var s int64
			if err := rows.Scan(&s); err != nil {
				return err
			}
			seqs = append(seqs, s)
			return nil
		}, args.args...)
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
	if _, err := tx.ExecContext(ctx, sqliteBatchTrim); err != nil {
		return 0, after, err
	}
	return deleted, after, nil
}

// Replays reads the audit rows of one message.
func (a sqliteAdmin) Replays(ctx context.Context, messageID string) ([]ReplayEntry, error) {
	if messageID == "" {
		return nil, invalid("empty id")
	}
	id, err := canonicalID(messageID)
	if err != nil {
		return nil, invalid("id %q is not a uuid", messageID)
	}
	var out []ReplayEntry
	err = a.each(ctx, `SELECT message_id, actor, reason, replayed_at, failure FROM outbox_replay
WHERE message_id = ? ORDER BY id`, nil, func(rows *sql.Rows) error {
		var e ReplayEntry
		var at int64
		if err := rows.Scan(&e.MessageID, &e.Actor, &e.Reason, &at, &e.Failure); err != nil {
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

// Partitions lists the embedded store's one partition.
func (a sqliteAdmin) Partitions(ctx context.Context) ([]PartitionInfo, error) {
	var p PartitionInfo
	var owner sql.NullString
	var exp, done sql.NullInt64
	var batches int64
	err := a.s.db.QueryRowContext(ctx, `SELECT part, owner, expires_at, fence, claim_to IS NOT NULL, takeovers, done_at,
	(SELECT count(*) FROM outbox_batch) FROM outbox_partition WHERE part = 0`).
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
	return []PartitionInfo{p}, nil
}

// SetPartitions is refused: the embedded store has one writer and one
// partition, whose position by insertion order is exact.
func (a sqliteAdmin) SetPartitions(ctx context.Context, n int) error {
	if n == 1 {
		return nil
	}
	return invalid("the embedded SQLite store has one partition; only PostgreSQL can have %d", n)
}

// ResetAfterRestore is refused: the embedded store's position is a seq,
// which a copy of the file keeps exact.
func (a sqliteAdmin) ResetAfterRestore(ctx context.Context) (ResetResult, error) {
	return ResetResult{}, invalid("the embedded SQLite store's position is a record number, exact in any copy of its file: there is nothing to reset")
}

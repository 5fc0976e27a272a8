package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/heraldgw/herald/outboxfeed"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Segments: herald.outbox is partitioned by seq into segments of
// SegmentRecords records (tables herald.outbox_s<first seq>), plus the
// default partition herald.outbox_default that catches any seq no segment
// covers. Retention never deletes rows of herald.outbox: a segment whose
// records are all done (every partition's position covers them) and older
// than the retention is dropped, or truncated while it is still the one
// receiving records (the default partition is only ever truncated).
// herald.outbox_segment lists the segments Herald made.

// segmentsAhead is how many segments are kept ending above the current
// seq, so a Pruner that runs every minute keeps ahead of one segment a
// minute (with the default size, about 16,000 records a second); records
// beyond go to the default partition, which is truncated once done. Every
// segment attached to herald.outbox, empty or not, costs each claim an
// index scan to open, so few are kept.
const segmentsAhead = 2

// segmentMargin is the gap left above the current seq when the first
// segment is made (those records go to the default partition).
const segmentMargin = 1000

// pgSegmentLockTimeout bounds how long dropping or truncating a segment
// waits for its lock (and so how long producers can queue behind it); a
// segment that is busy is left for the next run.
const pgSegmentLockTimeout = "50ms"

// KeepSegments implements outboxfeed.SegmentKeeper: it creates the
// segments the next records need and removes the ones retention lets go;
// it returns how many it removed.
func (s *Store) KeepSegments(ctx context.Context, size int64, retention, archiveWaitMax time.Duration) (int, error) {
	if err := s.ensureSegments(ctx, size); err != nil {
		return 0, fmt.Errorf("outboxfeed: create segments: %w", err)
	}
	removed, err := s.removeSegments(ctx, retention, archiveWaitMax)
	if err != nil {
		return removed, fmt.Errorf("outboxfeed: remove segments: %w", err)
	}
	// The batch log only dates completions; past the retention a record's
	// completion time falls back to its partition's last one.
	if _, err := s.pool.Exec(ctx, `DELETE FROM herald.outbox_batch WHERE done_at < now() - $1::bigint * interval '1 microsecond'`,
		retention.Microseconds()); err != nil {
		return removed, fmt.Errorf("outboxfeed: prune batch log: %w", err)
	}
	return removed, nil
}

// ensureSegments makes sure segmentsAhead segments end above the current
// seq (the one receiving records and those after it).
func (s *Store) ensureSegments(ctx context.Context, size int64) error {
	var cur int64
	var ahead int
	var top *int64
	err := s.pool.QueryRow(ctx, `SELECT c.v, (SELECT count(*) FROM herald.outbox_segment WHERE to_seq > c.v),
		(SELECT max(to_seq) FROM herald.outbox_segment)
	FROM (SELECT last_value AS v FROM herald.outbox_record_seq) c`).Scan(&cur, &ahead, &top)
	if err != nil {
		return err
	}
	// A margin above the current seq: an insert racing this one would
	// otherwise land in the default partition inside the new range, and
	// the attach would fail.
	start := cur + 1 + segmentMargin
	if top != nil && *top > start {
		start = *top
	}
	for ; ahead < segmentsAhead; ahead++ {
		if err := s.addSegment(ctx, start, start+size); err != nil {
			if isLockTimeout(err) {
				return nil // claims kept the default partition busy: next run
			}
			return err
		}
		start += size
	}
	return nil
}

// addSegment creates and attaches the segment [from, to).
func (s *Store) addSegment(ctx context.Context, from, to int64) error {
	name := "outbox_s" + strconv.FormatInt(from, 10)
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// The attach waits for the claims reading the default partition;
		// producers do not wait for it (they insert into segments).
		if _, err := tx.Exec(ctx, pgSegmentTxSettings, pgAttachLockTimeout); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, pgMigrateLockKey); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM herald.outbox_segment WHERE from_seq < $2 AND to_seq > $1)`,
			from, to).Scan(&exists); err != nil || exists {
			return err
		}
		// CREATE + ATTACH takes a SHARE UPDATE EXCLUSIVE lock on the
		// parent, which inserts do not wait for (CREATE ... PARTITION OF
		// would take an ACCESS EXCLUSIVE one).
		if _, err := tx.Exec(ctx, `CREATE TABLE herald.`+name+` (LIKE herald.outbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED)`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(`ALTER TABLE herald.outbox ATTACH PARTITION herald.%s FOR VALUES FROM (%d) TO (%d)`, name, from, to)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO herald.outbox_segment (name, from_seq, to_seq) VALUES ($1, $2, $3)`, name, from, to)
		return err
	})
}

// pgSegmentDone is true when every record of the segment %[1]s is
// covered by its partition's position. Only records whose transaction is
// not below the partition's lo.xmin need a look (those below are visible
// in lo, or rolled back), found through outbox_part_xid_idx.
const pgSegmentDone = `
SELECT NOT EXISTS (
	SELECT 1 FROM herald.outbox_partition p
	CROSS JOIN LATERAL (
		SELECT 1 FROM %[1]s o WHERE o.part = p.part AND o.xid >= pg_snapshot_xmin(p.lo)
			AND NOT pg_visible_in_snapshot(o.xid, p.lo)
			AND NOT (p.hi IS NOT NULL AND pg_visible_in_snapshot(o.xid, p.hi) AND o.seq <= p.pos_seq)
		LIMIT 1) x)`

// segment is one row of herald.outbox_segment (or the default partition).
type segment struct {
	name     string
	from, to int64
	full     bool // no record can be added any more (to_seq is past the sequence)
	archived bool // moved to herald.outbox_archive
	old      bool // archived, and its newest record is past the retention
}

// removeSegments archives the full segments whose records are all done,
// drops the archived ones past retention, and truncates the open one (and
// the default partition) when its records are all done and its newest is
// older than retention.
func (s *Store) removeSegments(ctx context.Context, retention, archiveWaitMax time.Duration) (int, error) {
	rows, err := s.pool.Query(ctx, `
SELECT name, from_seq, to_seq, to_seq <= (SELECT last_value FROM herald.outbox_record_seq), archived_at IS NOT NULL,
	coalesce(newest_at < now() - $1::bigint * interval '1 microsecond', true)
FROM herald.outbox_segment
UNION ALL SELECT 'outbox_default', 0, 0, false, false, false
ORDER BY 1`, retention.Microseconds())
	if err != nil {
		return 0, err
	}
	var segs []segment
	for rows.Next() {
		var sg segment
		if err := rows.Scan(&sg.name, &sg.from, &sg.to, &sg.full, &sg.archived, &sg.old); err != nil {
			rows.Close()
			return 0, err
		}
		segs = append(segs, sg)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	removed := 0
	for _, sg := range segs {
		var ok bool
		var err error
		if sg.archived {
			if sg.old {
				ok, err = s.dropArchived(ctx, sg.name)
			}
		} else {
			ok, err = s.removeSegment(ctx, sg, retention, archiveWaitMax)
		}
		if err != nil {
			return removed, err
		}
		if ok {
			removed++
		}
	}
	return removed, nil
}

// removeSegment drops (full) or truncates the attached segment sg if it
// is done and old enough, and archives a full one that is done but not
// old yet. It looks first without a lock (most segments are empty, or not
// done), then takes the segment's lock, so that every record an open
// transaction was writing into it has committed (or rolled back), and
// looks again. Pruners of several processes take turns (pgPruneLockKey);
// one that finds another at work leaves the segment to its next run.
func (s *Store) removeSegment(ctx context.Context, sg segment, retention, archiveWaitMax time.Duration) (bool, error) {
	name := sg.name
	check := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) (empty, done bool, newest *time.Time, old bool, err error) {
		if err := q.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM herald.`+name+`)`).Scan(&empty); err != nil {
			return false, false, nil, false, err
		}
		if empty {
			return true, true, nil, true, nil
		}
		if err := q.QueryRow(ctx, fmt.Sprintf(pgSegmentDone, "herald."+name)).Scan(&done); err != nil || !done {
			return false, false, nil, false, err
		}
		err = q.QueryRow(ctx, `SELECT max(occurred_at), coalesce(max(occurred_at) < now() - $1::bigint * interval '1 microsecond', true)
			FROM herald.`+name, retention.Microseconds()).Scan(&newest, &old)
		return false, true, newest, old, err
	}
	// An empty open segment has nothing to remove; a full one that is done
	// goes (dropped when old, else archived).
	empty, done, _, old, err := check(s.pool)
	if err != nil || !done || !sg.full && (empty || !old) {
		return false, err
	}
	if sg.full && !empty && !old {
		// To be archived: the archive's id index wants one on the
		// segment, which herald.outbox has not had since migration 15
		// (producers do not pay for it). Built here, out of the move's
		// transaction, so that the move does not build it while it holds
		// herald.outbox's lock; claims read the segment meanwhile.
		if err := s.pruneTx(ctx, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `CREATE INDEX IF NOT EXISTS `+name+`_id_idx ON herald.`+name+` (id)`)
			return err
		}); err != nil {
			return false, err
		}
	}
	var removed, archiving, moved bool
	err = s.pruneTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE herald.`+name+` IN ACCESS EXCLUSIVE MODE`); err != nil {
			return err // busy (lock timeout): next run
		}
		empty, done, newest, old, err := check(tx)
		if err != nil || !done {
			return err
		}
		switch {
		case sg.full && old:
			if _, err := tx.Exec(ctx, `DROP TABLE herald.`+name); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `DELETE FROM herald.outbox_segment WHERE name = $1`, name)
		case sg.full:
			// Without its id index (the build above waited too long for
			// the segment's lock): next run.
			var indexed bool
			if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, "herald."+name+"_id_idx").Scan(&indexed); err != nil || !indexed {
				return err
			}
			// Done, kept for the retention: out of the claims' way. The
			// detach needs herald.outbox's own lock, which producers'
			// transactions hold while they run: it waits longer after each
			// run it could not get it (archiveWait).
			archiving = true
			if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, s.archiveWait.next(archiveWaitMax).String()); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `ALTER TABLE herald.outbox DETACH PARTITION herald.`+name); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, fmt.Sprintf(`ALTER TABLE herald.outbox_archive ATTACH PARTITION herald.%s FOR VALUES FROM (%d) TO (%d)`,
				name, sg.from, sg.to)); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `UPDATE herald.outbox_segment SET archived_at = now(), newest_at = $2 WHERE name = $1`, name, newest)
			moved = err == nil
			return err // archived, not removed
		case empty || !old:
			return nil
		default:
			_, err = tx.Exec(ctx, `TRUNCATE herald.`+name)
		}
		removed = err == nil
		return err
	})
	if archiving {
		s.archiveWait.done(err == nil && moved)
	}
	return removed, err
}

// archiveWait is how long the next move of a segment to the archive
// waits for herald.outbox's lock: outboxfeed.ArchiveLockTimeoutMin, doubled after
// each move that could not get it, up to the configured bound, and back
// to the minimum after one that did.
type archiveWait struct {
	mu  sync.Mutex
	cur time.Duration
}

// next is the wait for the next move.
func (w *archiveWait) next(limit time.Duration) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cur == 0 {
		w.cur = outboxfeed.ArchiveLockTimeoutMin
	}
	w.cur = min(w.cur, limit)
	return w.cur
}

// done records whether the move got the lock.
func (w *archiveWait) done(ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ok {
		w.cur = outboxfeed.ArchiveLockTimeoutMin
		return
	}
	w.cur *= 2
}

// dropArchived drops the archived segment name (past the retention).
func (s *Store) dropArchived(ctx context.Context, name string) (bool, error) {
	var dropped bool
	err := s.pruneTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DROP TABLE herald.`+name); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM herald.outbox_segment WHERE name = $1`, name)
		dropped = err == nil
		return err
	})
	return dropped, err
}

// pruneTx runs fn in a transaction bounded by pgSegmentTxSettings, if it is
// this Pruner's turn (pgPruneLockKey); when another Pruner is at work, or a
// lock is busy (lock timeout), it does nothing and the next run tries
// again.
func (s *Store) pruneTx(ctx context.Context, fn func(pgx.Tx) error) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var turn bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, pgPruneLockKey).Scan(&turn); err != nil || !turn {
			return err
		}
		if _, err := tx.Exec(ctx, pgSegmentTxSettings, pgSegmentLockTimeout); err != nil {
			return err
		}
		return fn(tx)
	})
	if err != nil && isLockTimeout(err) {
		return nil
	}
	return err
}

// pgSegmentTxSettings bound what a segment transaction can cost others:
// it waits at most $1 for a lock (pgSegmentLockTimeout where producers
// would queue behind it), and should its process freeze while it holds one
// (the attach locks the default partition, a drop or truncate its segment),
// the server ends it after a second.
const pgSegmentTxSettings = `SELECT set_config('lock_timeout', $1, true),
	set_config('idle_in_transaction_session_timeout', '1s', true)`

// pgAttachLockTimeout bounds an attach's wait for the default partition.
const pgAttachLockTimeout = "500ms"

// isLockTimeout reports a lock_timeout expiry (SQLSTATE 55P03).
func isLockTimeout(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "55P03"
}

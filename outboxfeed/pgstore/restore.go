package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/internal/storekit"

	"github.com/jackc/pgx/v5"
)

// ErrRestored is returned by the PostgreSQL store's Migrate when the
// partitions' positions come from another cluster: the database was
// restored from a logical dump (pg_dump, pg_restore) or copied by logical
// replication. Positions are transaction snapshots; the new cluster's
// transaction ids are lower than the old one's, so every record staged
// now would count as done and never be delivered. ResetAfterRestore (herald
// outbox reset-after-restore) makes them safe again; see
// docs/runbooks/store-outage.md.
var ErrRestored = errors.New("outboxfeed: the outbox positions come from another PostgreSQL cluster " +
	"(restored from a logical dump?): run `herald outbox reset-after-restore` " +
	"(docs/runbooks/store-outage.md, \"After a restore\") before starting Workers")

// pgForeignPositions is true when a partition's position lies ahead of
// this cluster's transaction counter: in the cluster that took them, no
// snapshot is ever ahead of the current one.
const pgForeignPositions = `
SELECT EXISTS (SELECT 1 FROM herald.outbox_partition p, (SELECT pg_snapshot_xmax(pg_current_snapshot()) AS x) c
	WHERE pg_snapshot_xmax(p.lo) > c.x OR (p.hi IS NOT NULL AND pg_snapshot_xmax(p.hi) > c.x))`

// checkPositions refuses positions taken in another cluster.
func checkPositions(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) error {
	var foreign bool
	if err := q.QueryRow(ctx, pgForeignPositions).Scan(&foreign); err != nil {
		return err
	}
	if foreign {
		return ErrRestored
	}
	return nil
}

// pgResetRequeue puts back in the retry queue every record that is not
// known done: not covered by the old positions (with the old transaction
// ids the dump kept), or staged after the newest batch the old cluster
// logged (a record staged in the new cluster has a seq past every seq of
// the dump; by the old positions it may look done). Records already queued
// keep their rows. The queue row goes to the partition the channel maps
// to now.
const pgResetRequeue = `
INSERT INTO herald.outbox_retry (handler, id, seq, xid, rec_part, part, tenant_id, channel, type, schema_version, payload, freshness,
	occurred_at, kind, state, attempt, next_attempt_at)
SELECT p.handler, o.id, o.seq, '3', o.part, herald.outbox_partition_of(o.tenant_id, o.channel), o.tenant_id, o.channel, o.type,
	o.schema_version, o.payload, o.freshness, o.occurred_at, o.kind, 'pending', 0, now()
FROM herald.outbox_all o
JOIN herald.outbox_partition p ON p.part = o.part
WHERE NOT EXISTS (SELECT 1 FROM herald.outbox_retry q WHERE q.seq = o.seq AND q.handler = p.handler)
	AND (o.seq > $1 OR NOT (pg_visible_in_snapshot(o.xid, p.lo)
		OR (p.hi IS NOT NULL AND pg_visible_in_snapshot(o.xid, p.hi) AND o.seq <= p.pos_seq)))
ORDER BY o.seq`

// ResetAfterRestore makes positions taken in another cluster safe (see
// ErrRestored), in one REPEATABLE READ transaction that claims wait for:
// every record not known done goes back to the retry queue (due at once,
// no attempt burnt); every record the transaction sees gets transaction id
// 3, below every snapshot, so it counts as read; and every partition
// starts again from this transaction's snapshot, which lists the
// producers still open, so what they stage is read when they commit. A
// record the old cluster had delivered but not yet logged in a batch may
// be delivered again (with its id). It refuses (ErrInvalidRequest) when
// the positions are this cluster's.
func (a pgAdmin) ResetAfterRestore(ctx context.Context) (outboxfeed.ResetResult, error) {
	var res outboxfeed.ResetResult
	err := pgx.BeginTxFunc(ctx, a.s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		res = outboxfeed.ResetResult{}
		if _, err := tx.Exec(ctx, `LOCK TABLE herald.outbox_partition IN EXCLUSIVE MODE`); err != nil {
			return err
		}
		if err := checkPositions(ctx, tx); err == nil {
			return storekit.Invalid("the outbox positions are this cluster's: there is nothing to reset")
		} else if !errors.Is(err, ErrRestored) {
			return err
		}
		var newest int64
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(to_seq), 0) FROM herald.outbox_batch`).Scan(&newest); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, pgResetRequeue, newest)
		if err != nil {
			return fmt.Errorf("requeue: %w", err)
		}
		res.Requeued = tag.RowsAffected()
		for _, table := range []string{"herald.outbox", "herald.outbox_archive"} {
			tag, err := tx.Exec(ctx, `UPDATE `+table+` SET xid = '3' WHERE xid <> '3'`)
			if err != nil {
				return fmt.Errorf("rewrite %s: %w", table, err)
			}
			res.Rewritten += tag.RowsAffected()
		}
		if _, err := tx.Exec(ctx, `UPDATE herald.outbox_retry SET xid = '3' WHERE xid IS NOT NULL AND xid <> '3'`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE herald.outbox_partition SET lo = pg_current_snapshot(), hi = NULL,
			pos_xid = '0', pos_seq = 0, open = false, owner = NULL, expires_at = NULL, takeovers = 0,
			tk_range = false, claim_qto = 0, tk_qseq = 0`); err != nil {
			return err
		}
		// A change of the partition count in progress takes its barrier
		// again, in this cluster.
		_, err = tx.Exec(ctx, `UPDATE herald.outbox_repartition SET retire_xmax = NULL, wait_vxids = NULL
			WHERE EXISTS (SELECT 1 FROM herald.outbox_partition WHERE state = 'retiring')`)
		return err
	})
	if err != nil {
		if errors.Is(err, outboxfeed.ErrInvalidRequest) {
			return outboxfeed.ResetResult{}, err
		}
		return outboxfeed.ResetResult{}, fmt.Errorf("outboxfeed: reset after restore: %w", err)
	}
	a.Wake()
	return res, nil
}

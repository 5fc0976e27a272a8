package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/internal/storekit"

	"github.com/jackc/pgx/v5"
)

// Partitions lists the partitions, in number order.
func (a pgAdmin) Partitions(ctx context.Context) ([]outboxfeed.PartitionInfo, error) {
	rows, err := a.s.pool.Query(ctx, `SELECT part, state, coalesce(owner, ''), expires_at, fence, open, takeovers,
	done_at, batches FROM herald.outbox_partition WHERE handler = $1 ORDER BY part`, a.s.handler)
	if err != nil {
		return nil, fmt.Errorf("outboxfeed: partitions: %w", err)
	}
	var out []outboxfeed.PartitionInfo
	var p outboxfeed.PartitionInfo
	var exp, done *time.Time
	_, err = pgx.ForEachRow(rows, []any{&p.Partition, &p.State, &p.Owner, &exp, &p.Fence, &p.Open, &p.Takeovers, &done, &p.Batches}, func() error {
		p.ExpiresAt, p.DoneAt = deref(exp), deref(done)
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("outboxfeed: partitions: %w", err)
	}
	return out, nil
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// SetPartitions changes the partition count to n, keeping each channel's
// order:
//
//  1. In one transaction: the active partitions become retiring, n new
//     ones are added as waiting, starting from the current snapshot (no
//     record of the new mapping can be visible in it: they are staged
//     after this commits), and herald.outbox_partition_of maps (tenant,
//     channel) to the new ones.
//  2. After the commit, the transactions then open in other sessions are
//     listed (their virtual transaction ids): only they can still stage
//     under the old mapping, whatever xid they get.
//  3. Workers go on draining the retiring partitions. Once every listed
//     transaction has ended, the claim that sees it takes its own xid as
//     the barrier: every record of the old mapping was staged by a
//     transaction below it. A retiring partition whose position passes
//     the barrier is retired, its retry queue moved to the records' new
//     partitions; when none is left retiring the new ones become active.
//     Meanwhile records of the new mapping wait, so none is published
//     before an older record of its channel. A transaction open at step 1
//     that stays open delays step 3.
//
// It refuses (ErrInvalidRequest) while a change is still in progress.
func (a pgAdmin) SetPartitions(ctx context.Context, n int) error {
	if n < 1 || n > outboxfeed.MaxPartitions {
		return storekit.Invalid("partition count %d: must be between 1 and %d", n, outboxfeed.MaxPartitions)
	}
	err := pgx.BeginFunc(ctx, a.s.pool, func(tx pgx.Tx) error {
		// Claims wait for this short transaction (and it for them).
		if _, err := tx.Exec(ctx, `LOCK TABLE herald.outbox_partition IN EXCLUSIVE MODE`); err != nil {
			return err
		}
		var changing bool
		var active, base int
		// Every handler has the same partitions; a change is in progress
		// until every handler's retiring partitions have retired.
		err := tx.QueryRow(ctx, `SELECT bool_or(state IN ('retiring', 'waiting')),
			count(*) FILTER (WHERE state = 'active' AND handler = 'realtime'),
			max(part) + 1 FROM herald.outbox_partition`).Scan(&changing, &active, &base)
		if err != nil {
			return err
		}
		if changing {
			return storekit.Invalid("a change of the partition count is still in progress (see herald outbox partitions)")
		}
		if active == n {
			return errUnchanged
		}
		if _, err := tx.Exec(ctx, `UPDATE herald.outbox_partition SET state = 'retiring' WHERE state = 'active'`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE herald.outbox_repartition SET retire_xmax = NULL, wait_vxids = NULL`); err != nil {
			return err
		}
		// Every handler gets the new partitions.
		if _, err := tx.Exec(ctx, `INSERT INTO herald.outbox_partition (handler, part, lo, state)
			SELECT h.name, g, pg_current_snapshot(), 'waiting' FROM herald.outbox_handler h,
				generate_series($1::int, $1::int + $2::int - 1) g`, base, n); err != nil {
			return err
		}
		// From migration 16 a SQL function, which the insert trigger's
		// function inlines once per session (PostgreSQL plans it again
		// after this replacement); before it PL/pgSQL: a SQL function
		// would be inlined, its body parsed again, each time an INSERT
		// computed the generated column part (migration 10). Both down
		// steps read base and count back.
		var inlined bool
		if err := tx.QueryRow(ctx, `SELECT to_regprocedure('herald.outbox_stage()') IS NOT NULL`).Scan(&inlined); err != nil {
			return err
		}
		def := fmt.Sprintf(`LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
	AS $fn$ BEGIN RETURN %d + ((hashtextextended(tenant_id || '/' || channel, 0) & 9223372036854775807) %% %d)::int; END $fn$`, base, n)
		if inlined {
			def = fmt.Sprintf(`LANGUAGE sql IMMUTABLE PARALLEL SAFE
	AS $fn$ SELECT %d + ((hashtextextended(tenant_id || '/' || channel, 0) & 9223372036854775807) %% %d)::int $fn$`, base, n)
		}
		_, err = tx.Exec(ctx, `CREATE OR REPLACE FUNCTION herald.outbox_partition_of(tenant_id text, channel text) RETURNS int
	`+def)
		return err
	})
	switch {
	case errors.Is(err, errUnchanged):
		return nil
	case errors.Is(err, outboxfeed.ErrInvalidRequest):
		return err
	case err != nil:
		return fmt.Errorf("outboxfeed: set partitions: %w", err)
	}
	// Step 2, in a transaction of its own (the claims do it too, should
	// this process stop here).
	if _, err := a.s.pool.Exec(ctx, `UPDATE herald.outbox_repartition SET wait_vxids = herald.outbox_open_vxids()
		WHERE wait_vxids IS NULL`); err != nil {
		return fmt.Errorf("outboxfeed: set partitions: barrier: %w", err)
	}
	a.Wake()
	return nil
}

var errUnchanged = errors.New("unchanged")

package main

import (
	"context"
	"fmt"

	"github.com/heraldgw/herald/outboxfeed/pgstore"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
	"github.com/heraldgw/herald/loadtest/internal/scratchdb"
)

// benchDB is the database the benchmark creates for itself.
type benchDB struct {
	*scratchdb.DB
	partitions int // Config.Partitions, until the first openStore has set it
}

// createDB creates herald_bench_<random> next to the database of adminURL.
func createDB(ctx context.Context, adminURL string) (*benchDB, error) {
	db, err := scratchdb.Create(ctx, adminURL, "herald_bench_")
	if err != nil {
		return nil, fmt.Errorf("outboxbench: %w", err)
	}
	return &benchDB{DB: db}, nil
}

// openStore opens the outbox store on the bench database, migrated, with
// the NOTIFY trigger installed or dropped.
func (db *benchDB) openStore(ctx context.Context, notifyTrigger bool) (*pgstore.Store, error) {
	s, err := pgstore.Open(ctx, pgstore.Config{URL: db.URL, DisableNotifyTrigger: !notifyTrigger})
	if err != nil {
		return nil, err
	}
	if err := s.Migrate(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if n := db.partitions; n > 0 {
		db.partitions = 0
		if err := s.Admin().SetPartitions(ctx, n); err != nil {
			s.Close()
			return nil, fmt.Errorf("outboxbench: -partitions: %w", err)
		}
	}
	return s, nil
}

// openReset opens the store as openStore does and resets its outbox with
// retained rows over channels (see reset): where each phase starts.
func (db *benchDB) openReset(ctx context.Context, notifyTrigger bool, retained, channels int) (*pgstore.Store, error) {
	s, err := db.openStore(ctx, notifyTrigger)
	if err != nil {
		return nil, err
	}
	if err := reset(ctx, s.Pool(), retained, channels); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// openPool opens a pool of up to n connections for producers.
func (db *benchDB) openPool(ctx context.Context, n int) (*pgxpool.Pool, error) {
	pool, err := benchkit.OpenPool(ctx, db.URL, n, "outboxbench-producer")
	if err != nil {
		return nil, fmt.Errorf("outboxbench: producer pool: %w", err)
	}
	return pool, nil
}

// reset empties the outbox, stages retained already-dispatched rows over
// channels, and refreshes the planner's statistics.
func reset(ctx context.Context, pool *pgxpool.Pool, retained, channels int) error {
	if _, err := pool.Exec(ctx, `TRUNCATE herald.outbox, herald.outbox_retry, herald.outbox_batch`); err != nil {
		return fmt.Errorf("outboxbench: truncate: %w", err)
	}
	if retained > 0 {
		// Dispatched records kept for retention: staged by a transaction
		// every partition's position covers (xid 2, frozen: visible in
		// every snapshot).
		_, err := pool.Exec(ctx, `INSERT INTO herald.outbox
			(tenant_id, channel, type, schema_version, payload, xid, occurred_at)
			SELECT $1, 'bench/c' || (g % $3), 'bench.record', 1,
			       jsonb_build_object('n', g, 'note', 'retained record'), '2', now() - interval '1 minute'
			FROM generate_series(1, $2::int) g`, benchTenant, retained, channels)
		if err != nil {
			return fmt.Errorf("outboxbench: stage retained rows: %w", err)
		}
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE herald.outbox`); err != nil {
		return fmt.Errorf("outboxbench: analyze: %w", err)
	}
	return nil
}

// serverInfo describes the PostgreSQL server for the report.
func serverInfo(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	s, err := benchkit.ServerInfo(ctx, pool)
	if err != nil {
		return "", fmt.Errorf("outboxbench: %w", err)
	}
	return s, nil
}

// countStates returns how many of handler's records are dispatched and
// how many are not.
func countStates(ctx context.Context, pool *pgxpool.Pool, handler string) (dispatched, other int, err error) {
	err = pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'dispatched'),
		count(*) FILTER (WHERE state <> 'dispatched') FROM herald.outbox_records WHERE handler = $1`, handler).Scan(&dispatched, &other)
	if err != nil {
		err = fmt.Errorf("outboxbench: count states: %w", err)
	}
	return dispatched, other, err
}

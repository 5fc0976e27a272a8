package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
	"github.com/heraldgw/herald/loadtest/internal/cfoutbox"
	"github.com/heraldgw/herald/loadtest/internal/scratchdb"
)

// openPool opens a pool of n connections on url (benchkit.OpenPool).
func openPool(ctx context.Context, url string, n int, app string) (*pgxpool.Pool, error) {
	pool, err := benchkit.OpenPool(ctx, url, n, app)
	if err != nil {
		return nil, fmt.Errorf("cfbench: pool: %w", err)
	}
	return pool, nil
}

// createDB creates cfbench_<random> next to the database of adminURL.
func createDB(ctx context.Context, adminURL string) (*scratchdb.DB, error) {
	db, err := scratchdb.Create(ctx, adminURL, "cfbench_")
	if err != nil {
		return nil, fmt.Errorf("cfbench: %w", err)
	}
	return db, nil
}

// recreateTable drops and creates Centrifugo's documented outbox table
// with an index on (partition, id), and — when trigger is set — the
// per-row pg_notify trigger from Centrifugo's docs (payload: the
// partition number, which the consumer LISTENs for).
func recreateTable(ctx context.Context, pool *pgxpool.Pool, trigger bool) error {
	if err := outbox(trigger).Create(ctx, pool); err != nil {
		return fmt.Errorf("cfbench: %w", err)
	}
	return nil
}

// payload is record i's publish command: the shape every phase inserts.
func payload(i, channels int) []byte {
	return cfoutbox.AppendPublish(nil, "bench:ch-"+strconv.Itoa(i%channels),
		[]byte(`{"n":`+strconv.Itoa(i)+`,"note":"outbox benchmark record"}`))
}

// stageSQL inserts records [0, n) with generate_series, building the same
// payloads as payload().
func stageSQL(ctx context.Context, pool *pgxpool.Pool, n, channels, partitions int) error {
	_, err := pool.Exec(ctx, `INSERT INTO `+outboxTable+` (method, payload, partition)
		SELECT 'publish',
		       convert_to('{"channel":"bench:ch-' || (g % $2) || '","data":{"n":' || g || ',"note":"outbox benchmark record"}}', 'UTF8'),
		       g % $3
		FROM generate_series(0, $1::int - 1) g
		ORDER BY g`, n, channels, partitions)
	if err != nil {
		return fmt.Errorf("cfbench: stage: %w", err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE `+outboxTable); err != nil {
		return fmt.Errorf("cfbench: analyze: %w", err)
	}
	return nil
}

// copyRows inserts records [from, to) in one transaction with COPY.
func copyRows(ctx context.Context, pool *pgxpool.Pool, from, to, channels, partitions int) error {
	rows := make([][]any, 0, to-from)
	for i := from; i < to; i++ {
		rows = append(rows, []any{"publish", payload(i, channels), int32(i % partitions)})
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.CopyFrom(ctx, pgx.Identifier{outboxTable}, []string{"method", "payload", "partition"}, pgx.CopyFromRows(rows))
		return err
	})
}

// insertOne inserts one row in its own statement (autocommit).
func insertOne(ctx context.Context, pool *pgxpool.Pool, body []byte, partition int) error {
	_, err := pool.Exec(ctx, outbox(false).InsertSQL(), body, partition)
	if err != nil {
		return fmt.Errorf("cfbench: insert: %w", err)
	}
	return nil
}

// perChannel is how many of records [0, n) land on channel ch.
func perChannel(n, channels, ch int) int {
	if ch >= n {
		return 0
	}
	return (n-1-ch)/channels + 1
}

package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// heraldOutbox is the table Herald's producers stage in.
const heraldOutbox = "herald.outbox"

// openProducerPool opens n connections to databaseURL for the outbox
// publisher, all of them before the run starts (so no transaction pays for
// a connect), and checks the outbox table is there: Herald migrates
// herald.outbox on start, so a -url server that does not use this
// database shows up here rather than as a run where nothing arrives.
func openProducerPool(ctx context.Context, databaseURL string, n int, table string) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("connbench: -database-url: %w", err)
	}
	pc.MaxConns, pc.MinConns = int32(n), int32(n)
	pc.ConnConfig.RuntimeParams["application_name"] = "connbench-producer"
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connbench: producer pool: %w", err)
	}
	if err := warmUp(ctx, pool, n, databaseURL, table); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// warmUp opens all n connections of pool at once (holding each until all
// are open) and checks that table exists.
func warmUp(ctx context.Context, pool *pgxpool.Pool, n int, databaseURL, table string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("connbench: producer connection: %w", err)
		}
		conns = append(conns, c)
	}
	var outbox *string
	if err := conns[0].QueryRow(ctx, `SELECT to_regclass($1)::text`, table).Scan(&outbox); err != nil {
		return fmt.Errorf("connbench: producer pool: %w", err)
	}
	if outbox == nil {
		if table == heraldOutbox {
			return fmt.Errorf("connbench: database %s has no herald.outbox: the server migrates it on start, so it is not the database the server uses", dbName(databaseURL))
		}
		return fmt.Errorf("connbench: database %s has no table %s", dbName(databaseURL), table)
	}
	return nil
}

// postgresInfo describes the PostgreSQL server for the report: commit
// latency depends on synchronous_commit and fsync.
func postgresInfo(ctx context.Context, pool *pgxpool.Pool) string {
	var version, fsync, syncCommit string
	err := pool.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('fsync'),
		current_setting('synchronous_commit')`).Scan(&version, &fsync, &syncCommit)
	if err != nil {
		return "PostgreSQL (settings unreadable: " + err.Error() + ")"
	}
	return fmt.Sprintf("PostgreSQL %s (fsync=%s, synchronous_commit=%s)", version, fsync, syncCommit)
}

// dbName is the database a URL names.
func dbName(databaseURL string) string {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return "(unparsable URL)"
	}
	return strings.TrimPrefix(u.Path, "/")
}

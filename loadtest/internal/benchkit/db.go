package benchkit

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// OpenPool opens a pool of exactly n connections on url (MinConns =
// MaxConns = n), with application_name app.
func OpenPool(ctx context.Context, url string, n int, app string) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	pc.MaxConns = int32(n)
	pc.MinConns = int32(n)
	pc.ConnConfig.RuntimeParams["application_name"] = app
	return pgxpool.NewWithConfig(ctx, pc)
}

// ServerInfo describes the PostgreSQL server for a report: its version
// and the settings that bound commit latency and caching.
func ServerInfo(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var version, fsync, syncCommit, sharedBuffers string
	err := pool.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('fsync'),
		current_setting('synchronous_commit'), current_setting('shared_buffers')`).
		Scan(&version, &fsync, &syncCommit, &sharedBuffers)
	if err != nil {
		return "", fmt.Errorf("server settings: %w", err)
	}
	return fmt.Sprintf("PostgreSQL %s (fsync=%s, synchronous_commit=%s, shared_buffers=%s)",
		version, fsync, syncCommit, sharedBuffers), nil
}

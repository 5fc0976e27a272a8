package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/heraldgw/herald/auth"
)

// openRevocations opens the revocation list where the deployment keeps its
// shared state: Redis when configured (every node sees it), else the
// PostgreSQL outbox database, else the embedded SQLite file.
func openRevocations(ctx context.Context, s storeSettings, b brokerSettings) (auth.RevocationStore, string, func() error, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	switch {
	case b.RedisURL != "":
		opt, err := redis.ParseURL(b.RedisURL)
		if err != nil {
			return nil, "", nil, fmt.Errorf("config: --redis-url: %w", err)
		}
		rdb := redis.NewClient(opt)
		if err := rdb.Ping(ctx).Err(); err != nil {
			return nil, "", nil, errors.Join(fmt.Errorf("revocations: redis: %w", err), rdb.Close())
		}
		return auth.NewRedisRevocations(rdb, b.RedisPrefix), "redis", rdb.Close, nil
	case s.isPostgres():
		pool, err := pgxpool.New(ctx, s.url())
		if err != nil {
			return nil, "", nil, fmt.Errorf("config: --database-url: %w", err)
		}
		st := auth.NewPostgresRevocations(pool)
		if err := st.Migrate(ctx); err != nil {
			pool.Close()
			return nil, "", nil, err
		}
		return st, "postgresql", func() error { pool.Close(); return nil }, nil
	default:
		if err := os.MkdirAll(filepath.Dir(s.url()), 0o700); err != nil {
			return nil, "", nil, fmt.Errorf("revocations: create data directory: %w", err)
		}
		st, err := auth.OpenSQLiteRevocations(ctx, s.url())
		if err != nil {
			return nil, "", nil, err
		}
		return st, "sqlite", st.Close, nil
	}
}

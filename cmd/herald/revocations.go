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
	"github.com/heraldgw/herald/fanout/redisbroker"
)

// openRedis connects to --redis-url (or the Sentinel deployment) for the state every node shares
// (revocations, tickets); nil when no Redis is configured.
func openRedis(ctx context.Context, b brokerSettings) (redis.UniversalClient, error) {
	if !b.usesRedis() {
		return nil, nil
	}
	rdb, err := redisbroker.NewClient(b.redisConfig())
	if err != nil {
		return nil, fmt.Errorf("config: --redis-*: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return nil, errors.Join(fmt.Errorf("redis: %w", err), rdb.Close())
	}
	return rdb, nil
}

// openTickets keeps SSE tickets in Redis when there is one (any node may
// redeem them), else in memory (one node).
func openTickets(rdb redis.UniversalClient, cfg auth.TicketConfig) (auth.TicketIssuer, error) {
	if rdb != nil {
		return auth.NewRedisTickets(rdb, cfg)
	}
	cfg.Prefix = ""
	return auth.NewMemoryTickets(cfg)
}

// openRevocations opens the revocation list where the deployment keeps its
// durable state: the PostgreSQL outbox database, else the embedded SQLite
// file; with Redis configured, in Redis too (every node reads both, and a
// revocation in either counts), so Redis losing its data loses no
// revocation. rdb, when not nil, is the Redis client to use; the caller
// closes it.
func openRevocations(ctx context.Context, s storeSettings, b brokerSettings, rdb redis.UniversalClient) (auth.RevocationStore, string, func() error, error) {
	durable, where, closeFn, err := openDurableRevocations(ctx, s)
	if err != nil || rdb == nil {
		return durable, where, closeFn, err
	}
	return auth.NewMirroredRevocations(durable, auth.NewRedisRevocations(rdb, b.RedisPrefix)), where + " and redis", closeFn, nil
}

// openDurableRevocations opens the revocation table of the outbox
// database: PostgreSQL, or the embedded SQLite file.
func openDurableRevocations(ctx context.Context, s storeSettings) (auth.RevocationStore, string, func() error, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	switch {
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

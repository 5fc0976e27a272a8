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

// openRedis connects to --redis-url for the state every node shares
// (revocations, tickets); nil when no Redis is configured.
func openRedis(ctx context.Context, b brokerSettings) (redis.UniversalClient, error) {
	if b.RedisURL == "" {
		return nil, nil
	}
	var rdb redis.UniversalClient
	if b.RedisCluster {
		opt, err := redis.ParseClusterURL(b.RedisURL)
		if err != nil {
			return nil, fmt.Errorf("config: --redis-url (cluster): %w", err)
		}
		rdb = redis.NewClusterClient(opt)
	} else {
		opt, err := redis.ParseURL(b.RedisURL)
		if err != nil {
			return nil, fmt.Errorf("config: --redis-url: %w", err)
		}
		rdb = redis.NewClient(opt)
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
func openTickets(rdb redis.UniversalClient, prefix string) (auth.TicketIssuer, error) {
	if rdb != nil {
		return auth.NewRedisTickets(rdb, auth.TicketConfig{Prefix: prefix})
	}
	return auth.NewMemoryTickets(auth.TicketConfig{})
}

// openRevocations opens the revocation list where the deployment keeps its
// shared state: Redis when configured (every node sees it), else the
// PostgreSQL outbox database, else the embedded SQLite file. rdb, when not
// nil, is the Redis client to use; the caller closes it.
func openRevocations(ctx context.Context, s storeSettings, b brokerSettings, rdb redis.UniversalClient) (auth.RevocationStore, string, func() error, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	switch {
	case rdb != nil:
		return auth.NewRedisRevocations(rdb, b.RedisPrefix), "redis", func() error { return nil }, nil
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

// Package testenv gives tests their own PostgreSQL database and Redis key
// prefix on the real services. It never skips: a missing service fails the
// test with a message saying how to start it (make test starts them).
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

const (
	defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	defaultRedisURL    = "redis://127.0.0.1:6379/0"
)

// BaseDatabaseURL is HERALD_TEST_DATABASE_URL or the local service.
func BaseDatabaseURL() string {
	if u := os.Getenv("HERALD_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return defaultDatabaseURL
}

// BaseRedisURL is HERALD_TEST_REDIS_URL or the local service.
func BaseRedisURL() string {
	if u := os.Getenv("HERALD_TEST_REDIS_URL"); u != "" {
		return u
	}
	return defaultRedisURL
}

// Suffix returns a short random hex string for names.
func Suffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// DatabaseURL creates a fresh database for t and returns its URL; the
// database is dropped when t ends.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	base := BaseDatabaseURL()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("testenv: PostgreSQL at %s does not answer (run `make test`, which starts it, or set HERALD_TEST_DATABASE_URL): %v", redact(base), err)
	}
	defer conn.Close(context.Background())
	name := "herald_t_" + Suffix()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("testenv: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("testenv: drop database %s: %v", name, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("testenv: drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("testenv: parse database URL: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// Redis returns a client on the test Redis and a key prefix unique to t;
// keys under the prefix are deleted when t ends.
func Redis(t testing.TB) (url string, prefix string) {
	t.Helper()
	u := BaseRedisURL()
	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatalf("testenv: parse redis URL: %v", err)
	}
	c := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		t.Fatalf("testenv: Redis at %s does not answer (run `make test`, which starts it, or set HERALD_TEST_REDIS_URL): %v", u, err)
	}
	prefix = "herald_t_" + Suffix() + ":"
	t.Cleanup(func() {
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
	return u, prefix
}

// RedisClient is a client of the test Redis and the key prefix of the
// test's own, as Redis gives them; the client is closed when the test
// ends.
func RedisClient(t testing.TB) (rdb *redis.Client, prefix string) {
	t.Helper()
	u, prefix := Redis(t)
	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatalf("testenv: parse redis URL: %v", err)
	}
	rdb = redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb, prefix
}

func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	return p.Redacted()
}

// Must is a tiny helper for test setup errors.
func Must(t testing.TB, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

package auth

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// revocationStores opens each RevocationStore implementation on its real
// backend for t.
func revocationStores() map[string]func(t *testing.T) RevocationStore {
	return map[string]func(t *testing.T) RevocationStore{
		"memory": func(t *testing.T) RevocationStore { return NewMemoryRevocations() },
		"postgres": func(t *testing.T) RevocationStore {
			ctx := context.Background()
			pool, err := pgxpool.New(ctx, testenv.DatabaseURL(t))
			testenv.Must(t, err, "pgxpool")
			t.Cleanup(pool.Close)
			s := NewPostgresRevocations(pool)
			var wg sync.WaitGroup
			errs := make([]error, 3)
			for i := range errs { // concurrent and repeated Migrate is safe
				wg.Go(func() { errs[i] = s.Migrate(ctx) })
			}
			wg.Wait()
			testenv.Must(t, errors.Join(errs...), "migrate")
			testenv.Must(t, s.Migrate(ctx), "migrate again")
			return s
		},
		"sqlite-path": func(t *testing.T) RevocationStore {
			s, err := OpenSQLiteRevocations(context.Background(), filepath.Join(t.TempDir(), "herald.db"))
			testenv.Must(t, err, "open sqlite")
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		"sqlite-db": func(t *testing.T) RevocationStore {
			db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "given.db"))
			testenv.Must(t, err, "open sqlite db")
			t.Cleanup(func() { _ = db.Close() })
			s := NewSQLiteRevocations(db)
			testenv.Must(t, s.Migrate(context.Background()), "migrate")
			testenv.Must(t, s.Migrate(context.Background()), "migrate again")
			testenv.Must(t, s.Close(), "close of a store that does not own its db")
			return s
		},
		"redis": openRedisRevocations,
		"mirrored": func(t *testing.T) RevocationStore {
			durable, err := OpenSQLiteRevocations(context.Background(), filepath.Join(t.TempDir(), "herald.db"))
			testenv.Must(t, err, "open sqlite")
			t.Cleanup(func() { _ = durable.Close() })
			return NewMirroredRevocations(durable, openRedisRevocations(t))
		},
	}
}

func openRedisRevocations(t *testing.T) RevocationStore {
	url, prefix := testenv.Redis(t)
	opt, err := redis.ParseURL(url)
	testenv.Must(t, err, "redis url")
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	return NewRedisRevocations(rdb, prefix)
}

// TestRevocationsSurviveRedisLosingItsData: revocations kept in Redis and
// in the outbox database (PostgreSQL here) go on counting after Redis
// restarts without persistence and comes back empty; Redis alone forgets
// them.
func TestRevocationsSurviveRedisLosingItsData(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	pool, err := pgxpool.New(ctx, testenv.DatabaseURL(t))
	testenv.Must(t, err, "pgxpool")
	t.Cleanup(pool.Close)
	pg := NewPostgresRevocations(pool)
	testenv.Must(t, pg.Migrate(ctx), "migrate")
	inRedis := NewRedisRevocations(rdb, "")
	both := NewMirroredRevocations(pg, inRedis)

	until := time.Now().Add(time.Hour)
	testenv.Must(t, both.Revoke(ctx, Revocation{SessionID: "s-1", Until: until, Reason: "stolen laptop"}), "revoke sid")
	testenv.Must(t, both.Revoke(ctx, Revocation{TokenID: "j-1", Until: until}), "revoke jti")
	revoked := []*Claims{{SessionID: "s-1"}, {TokenID: "j-1"}}
	check := func(when string, s RevocationStore, want bool) {
		t.Helper()
		for _, c := range revoked {
			got, err := s.IsRevoked(ctx, c)
			if err != nil || got != want {
				t.Fatalf("%s: IsRevoked(%+v) = %v, %v; want %v", when, c, got, err, want)
			}
		}
		set, err := s.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range revoked {
			if set.Revoked(c) != want {
				t.Fatalf("%s: snapshot says %v for %+v, want %v", when, !want, c, want)
			}
		}
	}
	check("before the restart, Redis", inRedis, true)
	check("before the restart, both", both, true)

	srv.Restart()
	check("after the restart, Redis alone", inRedis, false)
	check("after the restart, both", both, true)
	list, err := both.List(ctx)
	if err != nil || len(list) != 2 || list[0].SessionID != "s-1" || list[0].Reason != "stolen laptop" {
		t.Fatalf("list after the restart: %+v, %v", list, err)
	}
	if got, err := both.IsRevoked(ctx, &Claims{SessionID: "s-2"}); got || err != nil {
		t.Fatalf("an unrevoked session: %v, %v", got, err)
	}
}

func TestRevocationStores(t *testing.T) {
	for name, open := range revocationStores() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testRevocationStore(t, open(t))
		})
	}
}

func testRevocationStore(t *testing.T, s RevocationStore) {
	ctx := context.Background()
	hour := time.Now().Add(time.Hour).Truncate(time.Millisecond)

	for _, bad := range []Revocation{
		{Until: hour},
		{SessionID: "a", TokenID: "b", Until: hour},
		{SessionID: "a"},
		{SessionID: string(make([]byte, MaxRevocationIDLen+1)), Until: hour},
	} {
		if err := s.Revoke(ctx, bad); !errors.Is(err, ErrInvalidRevocation) {
			t.Fatalf("Revoke(%+v): want ErrInvalidRevocation, got %v", bad, err)
		}
	}

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Revoke(ctx, Revocation{SessionID: "s1", Until: hour, Reason: "stolen laptop"}))
	must(s.Revoke(ctx, Revocation{TokenID: "t1", Until: hour, Reason: "leaked in a log"}))
	must(s.Revoke(ctx, Revocation{SessionID: "long-gone", Until: time.Now().Add(-time.Second)}))

	check := func(c *Claims, want bool) {
		t.Helper()
		got, err := s.IsRevoked(ctx, c)
		must(err)
		if got != want {
			t.Fatalf("IsRevoked(%+v) = %v, want %v", c, got, want)
		}
	}
	check(&Claims{SessionID: "s1"}, true)
	check(&Claims{TokenID: "t1"}, true)
	check(&Claims{SessionID: "t1"}, false) // kinds do not mix
	check(&Claims{TokenID: "s1"}, false)
	check(&Claims{SessionID: "s2", TokenID: "t1"}, true)
	check(&Claims{SessionID: "long-gone"}, false)
	check(&Claims{}, false)
	check(nil, false)

	list, err := s.List(ctx)
	must(err)
	if len(list) != 2 || list[0].SessionID != "s1" || list[1].TokenID != "t1" ||
		list[0].Reason != "stolen laptop" || !list[0].Until.Equal(hour) || list[0].CreatedAt.IsZero() {
		t.Fatalf("List = %+v", list)
	}

	// Revoking again keeps the later Until and takes the new reason.
	must(s.Revoke(ctx, Revocation{SessionID: "s1", Until: hour.Add(-30 * time.Minute), Reason: "confirmed"}))
	list, err = s.List(ctx)
	must(err)
	if len(list) != 2 || !list[0].Until.Equal(hour) || list[0].Reason != "confirmed" {
		t.Fatalf("after re-revoke: %+v", list)
	}

	snap, err := s.Snapshot(ctx)
	must(err)
	if snap.Len() != 2 || !snap.Revoked(&Claims{SessionID: "s1"}) || !snap.Revoked(&Claims{TokenID: "t1"}) ||
		snap.Revoked(&Claims{SessionID: "long-gone"}) || snap.Revoked(&Claims{SessionID: "x", TokenID: "y"}) {
		t.Fatalf("snapshot wrong: %d entries", snap.Len())
	}

	// A revocation stops counting at Until and is then pruned.
	must(s.Revoke(ctx, Revocation{TokenID: "short", Until: time.Now().Add(150 * time.Millisecond)}))
	check(&Claims{TokenID: "short"}, true)
	testenv.Eventually(t, 5*time.Second, "revocation lapses at Until", func() bool {
		ok, err := s.IsRevoked(ctx, &Claims{TokenID: "short"})
		return err == nil && !ok
	})
	n, err := s.Prune(ctx)
	must(err)
	if n != 1 {
		t.Fatalf("Prune removed %d, want 1 (the lapsed one; the past one went with the next Revoke)", n)
	}
	if n, err := s.Prune(ctx); err != nil || n != 0 {
		t.Fatalf("second Prune: %d, %v", n, err)
	}
	snap, err = s.Snapshot(ctx)
	must(err)
	if snap.Len() != 2 {
		t.Fatalf("snapshot after prune has %d entries, want 2", snap.Len())
	}
}

func TestRevocationSetNil(t *testing.T) {
	var s *RevocationSet
	if s.Len() != 0 || s.Revoked(&Claims{SessionID: "x"}) {
		t.Fatal("nil set must be empty")
	}
}

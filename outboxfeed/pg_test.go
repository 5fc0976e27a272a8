package outboxfeed

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// newPGStore opens and migrates a store on a fresh database.
func newPGStore(t *testing.T, cfg Config) (*PGStore, string) {
	t.Helper()
	url := testenv.DatabaseURL(t)
	cfg.DatabaseURL = url
	s, err := OpenPG(context.Background(), cfg)
	testenv.Must(t, err, "open postgres store")
	t.Cleanup(func() { _ = s.Close() })
	testenv.Must(t, s.Migrate(context.Background()), "migrate")
	return s, url
}

func pgHarness(t *testing.T) *harness {
	s, _ := newPGStore(t, Config{})
	return &harness{
		store: s,
		table: "herald.outbox",
		stage: func(t *testing.T, commit bool, ns ...Notification) []string {
			t.Helper()
			ctx := context.Background()
			tx, err := s.Pool().Begin(ctx)
			testenv.Must(t, err, "begin")
			defer func() { _ = tx.Rollback(ctx) }()
			ids := make([]string, len(ns))
			for i, n := range ns {
				ids[i], err = Stage(ctx, tx, n)
				testenv.Must(t, err, "stage")
			}
			if commit {
				testenv.Must(t, tx.Commit(ctx), "commit")
			}
			return ids
		},
		exec: func(ctx context.Context, sql string) error {
			_, err := s.Pool().Exec(ctx, sql)
			return err
		},
		hourLater: "now() + interval '1 hour'",
	}
}

func TestPostgresConformance(t *testing.T) {
	runConformance(t, pgHarness)
}

func TestPostgresStageNotificationFunction(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	pool := s.Pool()
	var plain string
	err := pool.QueryRow(ctx, `SELECT herald.stage_notification('acme', 'orders/1', 'order.updated', 1, '{"status":"paid"}')`).Scan(&plain)
	testenv.Must(t, err, "stage_notification without id/freshness")
	r := mustGet(t, s, plain)
	if r.TenantID != "acme" || r.Channel != "orders/1" || r.Type != "order.updated" || r.SchemaVersion != 1 ||
		!jsonEqual(t, r.Payload, json.RawMessage(`{"status":"paid"}`)) || !jsonEqual(t, r.Freshness, json.RawMessage(`{"mode":"immediate"}`)) {
		t.Fatalf("record = %+v", r)
	}
	if _, ok := r.State.(Pending); !ok {
		t.Fatalf("state = %#v", r.State)
	}
	const id = "0190f0c4-2222-4333-8444-555566667777"
	var got string
	err = pool.QueryRow(ctx, `SELECT herald.stage_notification('acme', 'orders/2', 'order.updated', 2, '[1]',
		id => $1, freshness => '{"mode":"advisory","authority":"order-2"}')`, id).Scan(&got)
	testenv.Must(t, err, "stage_notification with id and freshness")
	if got != id {
		t.Fatalf("returned %q, want %q", got, id)
	}
	if r := mustGet(t, s, id); !jsonEqual(t, r.Freshness, json.RawMessage(`{"mode":"advisory","authority":"order-2"}`)) || r.SchemaVersion != 2 {
		t.Fatalf("record = %+v", r)
	}
	// Positional id only, inside a producer's transaction that rolls back.
	tx, err := pool.Begin(ctx)
	testenv.Must(t, err, "begin")
	var rolled string
	testenv.Must(t, tx.QueryRow(ctx, `SELECT herald.stage_notification('acme', 'orders/3', 't', 1, '{}', gen_random_uuid())`).Scan(&rolled), "stage in tx")
	testenv.Must(t, tx.Rollback(ctx), "rollback")
	if _, err := s.Get(ctx, rolled); err == nil {
		t.Fatal("a rolled-back stage_notification left a record")
	}
	var overloads int
	testenv.Must(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = 'herald' AND p.proname = 'stage_notification'`).Scan(&overloads), "count functions")
	if overloads != 1 {
		t.Fatalf("%d stage_notification functions, want exactly 1", overloads)
	}
	if err := pool.QueryRow(ctx, `SELECT herald.stage_notification('acme', 'orders/1', 'Bad Type', 1, '{}')`).Scan(&got); err == nil {
		t.Fatal("stage_notification accepted an invalid type")
	}
}

func hasNotifyTrigger(t *testing.T, s *PGStore) bool {
	t.Helper()
	var has bool
	testenv.Must(t, s.Pool().QueryRow(context.Background(), pgHasNotifyTrigger).Scan(&has), "query trigger")
	return has
}

func TestPostgresNotifyTriggerSetting(t *testing.T) {
	t.Parallel()
	s, url := newPGStore(t, Config{})
	if !hasNotifyTrigger(t, s) {
		t.Fatal("default Migrate did not install the notify trigger")
	}
	opened, err := Open(context.Background(), Config{DatabaseURL: url, DisableNotifyTrigger: true})
	testenv.Must(t, err, "open")
	defer opened.Close()
	off, ok := opened.(*PGStore)
	if !ok {
		t.Fatalf("Open chose %T for a postgres:// URL", opened)
	}
	testenv.Must(t, off.Migrate(context.Background()), "migrate without trigger")
	if hasNotifyTrigger(t, s) {
		t.Fatal("Migrate with DisableNotifyTrigger left the trigger")
	}
	// Without the trigger, StageOne of the same store still wakes its
	// Workers; records from elsewhere are found by polling.
	rec := newRecorder()
	startWorker(t, off, rec, WorkerConfig{PollInterval: 10 * time.Second})
	id, err := off.StageOne(context.Background(), note("orders/1", `{}`))
	testenv.Must(t, err, "stage")
	rec.waitFor(t, 2*time.Second, "in-process wake-up", func() bool { _, ok := rec.byID(id); return ok })
	testenv.Must(t, s.Migrate(context.Background()), "migrate with trigger")
	if !hasNotifyTrigger(t, s) {
		t.Fatal("Migrate did not reinstall the trigger")
	}
}

// The listener runs on its own connection and comes back after it is
// killed, draining what was staged meanwhile.
func TestPostgresListenerReconnects(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	rec := newRecorder()
	w := startWorker(t, s, rec, WorkerConfig{PollInterval: 10 * time.Second})
	eventually(t, 5*time.Second, "worker ready", w.Ready)
	ctx := context.Background()
	listenerPIDs := func() []int32 {
		rows, err := s.Pool().Query(ctx, `SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'herald-listener'`)
		testenv.Must(t, err, "query listener")
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		testenv.Must(t, err, "collect")
		return pids
	}
	eventually(t, 5*time.Second, "listener connected", func() bool { return len(listenerPIDs()) == 1 })
	old := listenerPIDs()[0]
	_, err := s.Pool().Exec(ctx, `SELECT pg_terminate_backend($1)`, old)
	testenv.Must(t, err, "terminate listener")
	// Staged while the listener may be down: the post-LISTEN drain finds it.
	id, err := s.StageOne(ctx, note("orders/1", `{"after":"kill"}`))
	testenv.Must(t, err, "stage")
	rec.waitFor(t, 3*time.Second, "delivery after the listener reconnected", func() bool { _, ok := rec.byID(id); return ok })
	eventually(t, 5*time.Second, "a new listener", func() bool {
		p := listenerPIDs()
		return len(p) == 1 && p[0] != old
	})
	id2, err := s.StageOne(ctx, note("orders/1", `{"second":true}`))
	testenv.Must(t, err, "stage")
	rec.waitFor(t, 2*time.Second, "notified delivery on the new listener", func() bool { _, ok := rec.byID(id2); return ok })
}

// A store outage: readiness turns false, store_up 0, nothing is dispatched
// or retried, and the Worker resumes by itself.
func TestPostgresStoreOutage(t *testing.T) {
	t.Parallel()
	s, url := newPGStore(t, Config{})
	dbName := url[strings.LastIndex(url, "/")+1:]
	if i := strings.IndexByte(dbName, '?'); i >= 0 {
		dbName = dbName[:i]
	}
	admin, err := pgx.Connect(context.Background(), testenv.BaseDatabaseURL())
	testenv.Must(t, err, "connect admin")
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	setAllowed := func(allowed bool) {
		t.Helper()
		_, err := admin.Exec(context.Background(), fmt.Sprintf(`ALTER DATABASE %s ALLOW_CONNECTIONS %t`, dbName, allowed))
		testenv.Must(t, err, "alter database")
		if !allowed {
			_, err = admin.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, dbName)
			testenv.Must(t, err, "terminate backends")
		}
	}
	t.Cleanup(func() { setAllowed(true) })

	rec := newRecorder()
	w := startWorker(t, s, rec, WorkerConfig{})
	eventually(t, 5*time.Second, "worker ready", w.Ready)
	if w.Readiness() != nil || testutil.ToFloat64(w.m.storeUp) != 1 {
		t.Fatalf("readiness %v store_up %v", w.Readiness(), testutil.ToFloat64(w.m.storeUp))
	}
	setAllowed(false)
	eventually(t, 10*time.Second, "worker unready", func() bool { return !w.Ready() })
	if err := w.Readiness(); err == nil || testutil.ToFloat64(w.m.storeUp) != 0 {
		t.Fatalf("during the outage: readiness %v store_up %v", err, testutil.ToFloat64(w.m.storeUp))
	}
	setAllowed(true)
	eventually(t, 10*time.Second, "worker ready again", w.Ready)
	id, err := s.StageOne(context.Background(), note("orders/1", `{"after":"outage"}`))
	testenv.Must(t, err, "stage")
	rec.waitFor(t, 5*time.Second, "dispatch resumed", func() bool { _, ok := rec.byID(id); return ok })
	if r, d := testutil.ToFloat64(w.m.retry), testutil.ToFloat64(w.m.deadLettered); r != 0 || d != 0 {
		t.Fatalf("a store outage touched messages: retry %v dead_letter %v", r, d)
	}
}

// The notify trigger sends a NOTIFY only while a Worker has armed it, so
// producers' commits do not queue behind NOTIFY while Workers are busy;
// an idle Worker arms it and is woken through it.
func TestPostgresNotifyOnlyWhileArmed(t *testing.T) {
	t.Parallel()
	s, url := newPGStore(t, Config{})
	ctx := context.Background()
	listener, err := pgx.Connect(ctx, url)
	testenv.Must(t, err, "connect listener")
	t.Cleanup(func() { _ = listener.Close(context.Background()) })
	_, err = listener.Exec(ctx, "LISTEN "+pgNotifyChannel)
	testenv.Must(t, err, "listen")
	notified := func(within time.Duration) bool {
		wctx, cancel := context.WithTimeout(ctx, within)
		defer cancel()
		_, err := listener.WaitForNotification(wctx)
		return err == nil
	}
	armedUntil := func() *time.Time {
		var at *time.Time
		testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT armed_until FROM herald.outbox_wakeup`).Scan(&at), "read switch")
		return at
	}
	if at := armedUntil(); at != nil {
		t.Fatalf("a fresh schema is armed until %v", at)
	}
	_, err = s.StageOne(ctx, note("orders/1", `{}`))
	testenv.Must(t, err, "stage")
	if notified(200 * time.Millisecond) {
		t.Fatal("a producer sent a NOTIFY while no Worker had armed the trigger")
	}
	_, err = s.Pool().Exec(ctx, pgArm, time.Minute.Microseconds())
	testenv.Must(t, err, "arm")
	_, err = s.StageOne(ctx, note("orders/1", `{}`))
	testenv.Must(t, err, "stage")
	if !notified(5 * time.Second) {
		t.Fatal("no NOTIFY while armed")
	}
	_, err = s.Pool().Exec(ctx, pgDisarm)
	testenv.Must(t, err, "disarm")

	rec := newRecorder()
	w := startWorker(t, s, rec, WorkerConfig{PollInterval: 10 * time.Second, IdleAfter: 20 * time.Millisecond})
	eventually(t, 5*time.Second, "the idle worker to arm the trigger", func() bool {
		at := armedUntil()
		return at != nil && at.After(time.Now().Add(10*time.Second))
	})
	id, err := s.StageOne(ctx, note("orders/2", `{}`))
	testenv.Must(t, err, "stage")
	rec.waitFor(t, 2*time.Second, "the notified delivery", func() bool { _, ok := rec.byID(id); return ok })
	eventually(t, 5*time.Second, "all three completed", func() bool { return testutil.ToFloat64(w.m.success) == 3 })
}

// Completion goes by the row version the claim returned, and by id when
// that version moved (VACUUM FULL rewrites the table).
func TestPostgresCompleteAfterRowsMoved(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	for i := range 3 {
		_, err := s.StageOne(ctx, note(fmt.Sprintf("orders/%d", i), `{}`))
		testenv.Must(t, err, "stage")
	}
	// Dead row versions ahead of the claimed ones, so VACUUM FULL moves them.
	_, err := s.Pool().Exec(ctx, `UPDATE herald.outbox SET attempt = attempt`)
	testenv.Must(t, err, "churn")
	res, err := s.claimCycle(ctx, claimRequest{owner: "w", limit: 10, lease: time.Hour})
	testenv.Must(t, err, "claim")
	if len(res.claimed) != 3 || len(res.places) != 3 {
		t.Fatalf("claimed %d records with %d places", len(res.claimed), len(res.places))
	}
	_, err = s.Pool().Exec(ctx, `VACUUM FULL herald.outbox`)
	testenv.Must(t, err, "vacuum full")
	var moved int
	testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT count(*) FROM herald.outbox WHERE NOT (ctid::text = ANY($1))`, res.places).Scan(&moved), "count moved")
	if moved == 0 {
		t.Fatal("VACUUM FULL moved no row; the fallback is not exercised")
	}
	leases := []Lease{res.claimed[0].Lease(), res.claimed[1].Lease(), res.claimed[2].Lease()}
	stale := Lease{ID: leases[2].ID, Fence: leases[2].Fence + 1}
	got, err := s.claimCycle(ctx, claimRequest{owner: "w", complete: []Lease{leases[0], leases[1], stale}, completeAt: res.places})
	testenv.Must(t, err, "complete")
	if got.completed != 2 {
		t.Fatalf("completed %d, want the 2 leases still held", got.completed)
	}
	for i, r := range res.claimed {
		_, dispatched := stateOf(t, s, r.ID).(Dispatched)
		if dispatched != (i < 2) {
			t.Fatalf("record %d dispatched = %v", i, dispatched)
		}
	}
}

// Store.Claim, like the Worker, looks past a head of the line stuck
// behind a retry that is not yet due.
func TestPostgresClaimLooksPastStuckHead(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	slow := make([]Notification, 200)
	for i := range slow {
		slow[i] = note("orders/slow", `{}`)
	}
	tx, err := s.Pool().Begin(ctx)
	testenv.Must(t, err, "begin")
	var ids []string
	for _, n := range append(slow, note("orders/fast", `{}`)) {
		id, err := Stage(ctx, tx, n)
		testenv.Must(t, err, "stage")
		ids = append(ids, id)
	}
	testenv.Must(t, tx.Commit(ctx), "commit")
	_, err = s.Pool().Exec(ctx, `UPDATE herald.outbox SET attempt = 1, last_error = 'busy', next_attempt_at = now() + interval '1 hour' WHERE id = $1`, ids[0])
	testenv.Must(t, err, "make the head wait")
	got, err := s.Claim(ctx, "w", 5, time.Hour)
	testenv.Must(t, err, "claim")
	if len(got) != 1 || got[0].ID != ids[len(ids)-1] {
		t.Fatalf("claimed %d records, want only the other channel's one", len(got))
	}
}

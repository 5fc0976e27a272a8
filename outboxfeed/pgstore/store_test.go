package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/heraldgw/herald/outboxfeed/storetest"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/stage"

	"github.com/google/uuid"
	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/internal/testenv"
	"github.com/jackc/pgx/v5"
)

// newPGStore opens and migrates a store on a fresh database.
func newPGStore(t *testing.T, cfg Config) (*Store, string) {
	t.Helper()
	s, url := openPGStore(t, cfg)
	testenv.Must(t, s.Migrate(context.Background()), "migrate")
	return s, url
}

// newPGStoreAt opens a store on a fresh database and builds the schema of
// the first version migrations (an older release's, for upgrade tests).
func newPGStoreAt(t *testing.T, version int) (*Store, string) {
	t.Helper()
	s, url := openPGStore(t, Config{})
	testenv.Must(t, s.migrateTo(context.Background(), version), fmt.Sprintf("migrate to version %d", version))
	return s, url
}

// openPGStore opens a store of cfg on a fresh database, with no schema.
func openPGStore(t *testing.T, cfg Config) (*Store, string) {
	t.Helper()
	url := testenv.DatabaseURL(t)
	cfg.URL = url
	s, err := Open(context.Background(), cfg)
	testenv.Must(t, err, "open postgres store")
	t.Cleanup(func() { _ = s.Close() })
	return s, url
}

func pgHarness(t *testing.T) *storetest.Harness {
	s, _ := newPGStore(t, Config{})
	return &storetest.Harness{
		Store: s,
		Table: "herald.outbox",
		// Schemas 9 and 12 leave them to the Worker.
		WorkerChecksTypeAndFreshness: true,
		WorkerChecksKindAndVersion:   true,
		Stage: func(t *testing.T, commit bool, ns ...stage.Notification) []string {
			return storetest.StagePgx(t, s.Pool(), commit, ns...)
		},
		Exec: func(ctx context.Context, sql string) error {
			_, err := s.Pool().Exec(ctx, sql)
			return err
		},
		PartitionOf: func(t *testing.T, k fanout.Key) int {
			var p int
			testenv.Must(t, s.Pool().QueryRow(context.Background(), `SELECT herald.outbox_partition_of($1, $2)`,
				k.Tenant, k.Channel).Scan(&p), "partition of")
			return p
		},
		Queued: func(t *testing.T, k fanout.Key) int {
			var n int
			testenv.Must(t, s.Pool().QueryRow(context.Background(), `SELECT count(*) FROM herald.outbox_retry
				WHERE tenant_id = $1 AND channel = $2 AND state = 'pending'`, k.Tenant, k.Channel).Scan(&n), "count queued")
			return n
		},
		StageOne: func(ctx context.Context, n stage.Notification) (string, error) {
			id, err := stageOne(ctx, s, n)
			return id, err
		},
		DueNow: func(t *testing.T) {
			_, err := s.Pool().Exec(context.Background(), `UPDATE herald.outbox_retry SET next_attempt_at = now() WHERE state = 'pending'`)
			testenv.Must(t, err, "make the retry queue due")
		},
	}
}

func TestPostgresConformance(t *testing.T) {
	storetest.Run(t, pgHarness)
}

func TestPostgresHandlers(t *testing.T) {
	t.Parallel()
	storetest.RunHandlers(t, pgHarness)
}

// TestPostgresIDsTimeOrdered checks the ids PostgreSQL makes (the column
// default, stage_notification) and Stage makes: version 7 uuids, unique,
// and in insertion order for the database's own.
func TestPostgresIDsTimeOrdered(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	pool := s.Pool()
	_, err := pool.Exec(ctx, `INSERT INTO herald.outbox (tenant_id, channel, type, schema_version, payload)
		SELECT 'acme', 'c/' || g, 't', 1, '{}' FROM generate_series(1, 1000) g`)
	testenv.Must(t, err, "plain insert")
	var fn string
	testenv.Must(t, pool.QueryRow(ctx, `SELECT herald.stage_notification('acme', 'orders/1', 't', 1, '{}')`).Scan(&fn), "stage_notification")
	var staged string
	testenv.Must(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
		staged, err = stage.Stage(ctx, tx, stage.Notification{TenantID: "acme", Channel: "orders/2", Type: "t", SchemaVersion: 1, Payload: json.RawMessage(`{}`)})
		return err
	}), "Stage")
	rows, err := pool.Query(ctx, `SELECT id::text FROM herald.outbox ORDER BY seq`)
	testenv.Must(t, err, "read ids")
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	testenv.Must(t, err, "collect ids")
	if len(ids) != 1002 || ids[1000] != fn || ids[1001] != staged {
		t.Fatalf("%d ids; last two %v, want %s %s", len(ids), ids[len(ids)-2:], fn, staged)
	}
	seen := map[string]bool{}
	for i, id := range ids {
		u, err := uuid.Parse(id)
		if err != nil || u.Version() != 7 || u.Variant() != uuid.RFC4122 || seen[id] {
			t.Fatalf("id %d %q: version %d, variant %v, seen before %v, err %v", i, id, u.Version(), u.Variant(), seen[id], err)
		}
		seen[id] = true
		if i > 0 && i <= 1000 && id <= ids[i-1] {
			t.Fatalf("id %d %s does not sort after %s", i, id, ids[i-1])
		}
	}
}

func TestPostgresStageNotificationFunction(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	pool := s.Pool()
	var plain string
	err := pool.QueryRow(ctx, `SELECT herald.stage_notification('acme', 'orders/1', 'order.updated', 1, '{"status":"paid"}')`).Scan(&plain)
	testenv.Must(t, err, "stage_notification without id/freshness")
	r := storetest.MustGet(t, s, plain)
	if r.TenantID != "acme" || r.Channel != "orders/1" || r.Type != "order.updated" || r.SchemaVersion != 1 ||
		!storetest.JSONEqual(t, r.Payload, json.RawMessage(`{"status":"paid"}`)) || !storetest.JSONEqual(t, r.Freshness, json.RawMessage(`{"mode":"immediate"}`)) {
		t.Fatalf("record = %+v", r)
	}
	if _, ok := r.State.(outboxfeed.Pending); !ok {
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
	if r := storetest.MustGet(t, s, id); !storetest.JSONEqual(t, r.Freshness, json.RawMessage(`{"mode":"advisory","authority":"order-2"}`)) || r.SchemaVersion != 2 {
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

func hasNotifyTrigger(t *testing.T, s *Store) bool {
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
	off, err := Open(context.Background(), Config{URL: url, DisableNotifyTrigger: true})
	testenv.Must(t, err, "open")
	defer off.Close()
	testenv.Must(t, off.Migrate(context.Background()), "migrate without trigger")
	if hasNotifyTrigger(t, s) {
		t.Fatal("Migrate with DisableNotifyTrigger left the trigger")
	}
	// Without the trigger, StageOne of the same store still wakes its
	// Workers; records from elsewhere are found by polling.
	rec := storetest.NewRecorder()
	storetest.StartWorker(t, off, rec, outboxfeed.WorkerConfig{PollInterval: storetest.WakeupsOnly})
	id, err := stageOne(context.Background(), off, storetest.Note("orders/1", `{}`))
	testenv.Must(t, err, "stage")
	rec.WaitFor(t, time.Minute, "in-process wake-up", func() bool { _, ok := rec.ByID(id); return ok })
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
	rec := storetest.NewRecorder()
	w := storetest.StartWorker(t, s, rec, outboxfeed.WorkerConfig{PollInterval: storetest.WakeupsOnly})
	storetest.Eventually(t, time.Minute, "worker ready", w.Ready)
	ctx := context.Background()
	listenerPIDs := func() []int32 {
		rows, err := s.Pool().Query(ctx, `SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'herald-listener'`)
		testenv.Must(t, err, "query listener")
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		testenv.Must(t, err, "collect")
		return pids
	}
	storetest.Eventually(t, 5*time.Second, "listener connected", func() bool { return len(listenerPIDs()) == 1 })
	old := listenerPIDs()[0]
	_, err := s.Pool().Exec(ctx, `SELECT pg_terminate_backend($1)`, old)
	testenv.Must(t, err, "terminate listener")
	// Staged while the listener may be down: the post-LISTEN drain finds it.
	id, err := stageOne(ctx, s, storetest.Note("orders/1", `{"after":"kill"}`))
	testenv.Must(t, err, "stage")
	rec.WaitFor(t, time.Minute, "delivery after the listener reconnected", func() bool { _, ok := rec.ByID(id); return ok })
	storetest.Eventually(t, time.Minute, "a new listener", func() bool {
		p := listenerPIDs()
		return len(p) == 1 && p[0] != old
	})
	id2, err := stageOne(ctx, s, storetest.Note("orders/1", `{"second":true}`))
	testenv.Must(t, err, "stage")
	rec.WaitFor(t, time.Minute, "notified delivery on the new listener", func() bool { _, ok := rec.ByID(id2); return ok })
}

// A store outage: readiness turns false, store_up 0, nothing is dispatched
// or retried, and the Worker resumes by itself.
func TestPostgresStoreOutage(t *testing.T) {
	t.Parallel()
	s, url := newPGStore(t, Config{})
	setAllowed := storeCutter(t, url)

	rec := storetest.NewRecorder()
	w := storetest.StartWorker(t, s, rec, outboxfeed.WorkerConfig{})
	storetest.Eventually(t, 5*time.Second, "worker ready", w.Ready)
	if w.Readiness() != nil || w.Metric("herald_outbox_store_up") != 1 {
		t.Fatalf("readiness %v store_up %v", w.Readiness(), w.Metric("herald_outbox_store_up"))
	}
	setAllowed(false)
	// A lane whose claim was already answered may still mark the Worker
	// ready once after the cut; the outage shows once every lane has met it.
	storetest.Eventually(t, 10*time.Second, "worker unready, with the store error and store_up 0", func() bool {
		return !w.Ready() && errors.Is(w.Readiness(), outboxfeed.ErrNotReady) && w.Metric("herald_outbox_store_up") == 0
	})
	setAllowed(true)
	storetest.Eventually(t, 10*time.Second, "worker ready again", w.Ready)
	id, err := stageOne(context.Background(), s, storetest.Note("orders/1", `{"after":"outage"}`))
	testenv.Must(t, err, "stage")
	rec.WaitFor(t, 5*time.Second, "dispatch resumed", func() bool { _, ok := rec.ByID(id); return ok })
	if r, d := w.Outcomes(outboxfeed.OutcomeRetry), w.Outcomes(outboxfeed.OutcomeDeadLetter); r != 0 || d != 0 {
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
	listener := listenForWakeups(t, url)
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
	_, err := stageOne(ctx, s, storetest.Note("orders/1", `{}`))
	testenv.Must(t, err, "stage")
	// A marker sent after the producer's commit: notifications arrive in
	// commit order, so a NOTIFY of the producer would come before it.
	_, err = s.Pool().Exec(ctx, `SELECT pg_notify($1, 'marker')`, pgNotifyChannel)
	testenv.Must(t, err, "marker")
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	first, err := listener.WaitForNotification(wctx)
	cancel()
	testenv.Must(t, err, "wait for the marker")
	if first.Payload != "marker" {
		t.Fatalf("a producer sent a NOTIFY (%q) while no Worker had armed the trigger", first.Payload)
	}
	_, err = s.Pool().Exec(ctx, pgArm, time.Minute.Microseconds())
	testenv.Must(t, err, "arm")
	_, err = stageOne(ctx, s, storetest.Note("orders/1", `{}`))
	testenv.Must(t, err, "stage")
	if !notified(5 * time.Second) {
		t.Fatal("no NOTIFY while armed")
	}
	_, err = s.Pool().Exec(ctx, pgDisarm)
	testenv.Must(t, err, "disarm")

	rec := storetest.NewRecorder()
	w := storetest.StartWorker(t, s, rec, outboxfeed.WorkerConfig{PollInterval: storetest.WakeupsOnly, IdleAfter: 20 * time.Millisecond})
	storetest.Eventually(t, time.Minute, "the idle worker to arm the trigger", func() bool {
		at := armedUntil()
		return at != nil && at.After(time.Now().Add(10*time.Second))
	})
	id, err := stageOne(ctx, s, storetest.Note("orders/2", `{}`))
	testenv.Must(t, err, "stage")
	rec.WaitFor(t, time.Minute, "the notified delivery", func() bool { _, ok := rec.ByID(id); return ok })
	storetest.Eventually(t, time.Minute, "all three completed", func() bool { return w.Outcomes(outboxfeed.OutcomeSuccess) == 3 })
}

// TestPostgresLoneRecordsCostFewClaims: records that come one at a time
// (each completed before the next is staged) wake the Worker through the
// trigger; each costs its claim and the completion's look for more, and
// the Worker goes straight back to waiting for the trigger instead of
// polling every ActivePollInterval for IdleAfter. Two lanes: a wake-up
// goes to the lead lane alone.
func TestPostgresLoneRecordsCostFewClaims(t *testing.T) {
	t.Parallel()
	const records = 20
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	rec := storetest.NewRecorder()
	w := storetest.StartWorker(t, s, rec, outboxfeed.WorkerConfig{PollInterval: time.Hour, IdleAfter: 5 * time.Second, Lanes: 2})
	armedUntil := func() *time.Time {
		var at *time.Time
		testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT armed_until FROM herald.outbox_wakeup`).Scan(&at), "read switch")
		return at
	}
	storetest.Eventually(t, time.Minute, "the idle worker to arm the trigger", func() bool { return armedUntil() != nil })
	before := w.Claims(outboxfeed.ClaimBatch) + w.Claims(outboxfeed.ClaimEmpty)
	for i := range records {
		id, err := stageOne(ctx, s, storetest.Note(fmt.Sprintf("orders/%d", i), `{}`))
		testenv.Must(t, err, "stage")
		rec.WaitFor(t, time.Minute, "the woken delivery", func() bool { _, ok := rec.ByID(id); return ok })
		// Completed, so the completion's look for more is over too: the
		// next record comes alone.
		storetest.Eventually(t, time.Minute, "the record completed", func() bool { return w.Outcomes(outboxfeed.OutcomeSuccess) == float64(i+1) })
	}
	claims := w.Claims(outboxfeed.ClaimBatch) + w.Claims(outboxfeed.ClaimEmpty) - before
	t.Logf("%d lone records: %.0f claims (%.0f with records)", records, claims, w.Claims(outboxfeed.ClaimBatch))
	// Each record: the woken claim and the completion's look for more;
	// besides, a few looks after arming, backing off.
	if claims > 3*records {
		t.Fatalf("%d lone records cost %.0f claims, want at most %d", records, claims, 3*records)
	}
	if at := armedUntil(); at == nil {
		t.Fatal("the trigger was left disarmed")
	}
}

// TestPostgresLeadLaneHeldUpLeavesTheRestToOthers: while the lead lane
// claims, the other lanes leave every partition to it and do not poll; one
// held up in a dispatch (a publish that does not return) no longer claims,
// and once PollInterval passed without a claim of it another lane takes
// the records of the other partitions.
func TestPostgresLeadLaneHeldUpLeavesTheRestToOthers(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	partOf := func(ch string) int {
		var p int
		testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT herald.outbox_partition_of('acme', $1)`, ch).Scan(&p), "partition of")
		return p
	}
	other := ""
	for i := 0; other == ""; i++ {
		if ch := fmt.Sprintf("orders/%d", i); partOf(ch) != partOf("orders/held") {
			other = ch
		}
	}
	held, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	var once sync.Once
	rec := storetest.NewRecorder()
	rec.Before = func(ctx context.Context, msg fanout.Message) error {
		if msg.Key.Channel == "orders/held" {
			once.Do(func() { close(held) })
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	}
	w := storetest.StartWorker(t, s, rec, outboxfeed.WorkerConfig{PollInterval: 50 * time.Millisecond, IdleAfter: time.Hour, Lanes: 2})
	storetest.Eventually(t, time.Minute, "both lanes' first claims", func() bool { return w.Claims(outboxfeed.ClaimEmpty) >= 2 })
	// The wake-up goes to the lead lane alone: it claims the record and
	// its publish holds it up.
	_, err := stageOne(ctx, s, storetest.Note("orders/held", `{}`))
	testenv.Must(t, err, "stage")
	select {
	case <-held:
	case <-time.After(time.Minute):
		t.Fatal("the held record was not published")
	}
	id, err := stageOne(ctx, s, storetest.Note(other, `{}`))
	testenv.Must(t, err, "stage")
	rec.WaitFor(t, time.Minute, "the other partition's record, from another lane", func() bool { _, ok := rec.ByID(id); return ok })
}

// TestPostgresRecordStagedBeforeArmingIsFound: a producer inserted while
// the trigger was disarmed (no NOTIFY will come) and commits after the
// Worker armed it; the Worker's looks after arming find the record long
// before its next poll.
func TestPostgresRecordStagedBeforeArmingIsFound(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	tx, ids := openStage(t, s, storetest.Note("orders/1", `{}`))
	rec := storetest.NewRecorder()
	storetest.StartWorker(t, s, rec, outboxfeed.WorkerConfig{PollInterval: time.Hour, IdleAfter: 30 * time.Second})
	storetest.Eventually(t, time.Minute, "the worker to arm the trigger", func() bool {
		var at *time.Time
		testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT armed_until FROM herald.outbox_wakeup`).Scan(&at), "read switch")
		return at != nil
	})
	testenv.Must(t, tx.Commit(ctx), "commit")
	rec.WaitFor(t, time.Minute, "the record committed after arming", func() bool { _, ok := rec.ByID(ids[0]); return ok })
}

// openStage begins a producer transaction on its own connection and
// stages ns in it, leaving it open; the test ends it (commit or rollback,
// else at cleanup).
func openStage(t *testing.T, s *Store, ns ...stage.Notification) (pgx.Tx, []string) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.Pool().Begin(ctx)
	testenv.Must(t, err, "begin")
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	ids := make([]string, len(ns))
	for i, n := range ns {
		ids[i], err = stage.Stage(ctx, tx, n)
		testenv.Must(t, err, "stage")
	}
	return tx, ids
}

// partitionOf is the partition of tenant/channel.
func partitionOf(t *testing.T, s *Store, tenant, channel string) int {
	t.Helper()
	var p int
	testenv.Must(t, s.Pool().QueryRow(context.Background(), `SELECT herald.outbox_partition_of($1, $2)`, tenant, channel).Scan(&p), "partition of")
	return p
}

// Records become visible in commit order, not in seq order: a record
// staged by a transaction that commits after a later one is neither
// skipped nor published twice.
func TestPostgresOutOfOrderCommits(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	if a, b := partitionOf(t, s, "acme", "A"), partitionOf(t, s, "acme", "B"); a != b {
		t.Fatalf("channels A and B are in partitions %d and %d; the test wants them in one", a, b)
	}
	t1, t1IDs := openStage(t, s, storetest.Note("A", `{"tx":1}`))
	t2IDs := pgStage(t, s, storetest.Note("A", `{"tx":2}`), storetest.Note("B", `{"tx":2}`))
	rec := storetest.NewRecorder()
	w := storetest.StartWorker(t, s, rec, outboxfeed.WorkerConfig{})
	rec.WaitFor(t, 5*time.Second, "T2's records", func() bool {
		_, a := rec.ByID(t2IDs[0])
		_, b := rec.ByID(t2IDs[1])
		return a && b
	})
	// Let the Worker complete T2's batch (its range then ends past T1's
	// seq) before T1 commits.
	storetest.Eventually(t, 5*time.Second, "T2's records dispatched", func() bool {
		_, a := storetest.StateOf(t, s, t2IDs[0]).(outboxfeed.Dispatched)
		_, b := storetest.StateOf(t, s, t2IDs[1]).(outboxfeed.Dispatched)
		return a && b
	})
	if _, err := s.Get(ctx, t1IDs[0]); err == nil {
		t.Fatal("an uncommitted record is visible")
	}
	testenv.Must(t, t1.Commit(ctx), "commit T1")
	rec.WaitFor(t, 5*time.Second, "T1's record", func() bool { _, ok := rec.ByID(t1IDs[0]); return ok })
	storetest.EventuallyIn[outboxfeed.Dispatched](t, 5*time.Second, "T1's record dispatched", s, t1IDs[0])
	// A later record of the same channel still comes after it.
	t3 := pgStage(t, s, storetest.Note("A", `{"tx":3}`))
	rec.WaitFor(t, 5*time.Second, "T3's record", func() bool { _, ok := rec.ByID(t3[0]); return ok })
	storetest.Eventually(t, 5*time.Second, "all completed", func() bool { return w.Outcomes(outboxfeed.OutcomeSuccess) >= 4 })
	storetest.ExactlyOnce(t, rec, []string{t1IDs[0], t2IDs[0], t2IDs[1], t3[0]})
	if got := rec.Channel(fanout.Key{Tenant: "acme", Channel: "A"}); fmt.Sprint(got) != fmt.Sprint([]string{t2IDs[0], t1IDs[0], t3[0]}) {
		t.Fatalf("channel A in commit order = %v", got)
	}
	st, err := s.Stats(ctx)
	testenv.Must(t, err, "stats")
	if st.Pending != 0 {
		t.Fatalf("stats after all delivered = %+v", st)
	}
}

// pgStage stages ns in one committed transaction.
func pgStage(t *testing.T, s *Store, ns ...stage.Notification) []string {
	t.Helper()
	tx, ids := openStage(t, s, ns...)
	testenv.Must(t, tx.Commit(context.Background()), "commit")
	return ids
}

// A transaction that stays open with an xid (a long report, a stuck
// producer) for a minute, holding the xmin horizon, does not hold back the
// 100,000 records of transactions that commit meanwhile, and its own
// record is delivered once it commits.
func TestPostgresLongTransactionDoesNotStall(t *testing.T) {
	t.Parallel()
	const txs, perTx = 100, 1000
	const held = 60 * time.Second
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	long, longIDs := openStage(t, s, storetest.Note("c/0", `{"long":true}`))
	opened := time.Now()
	rec := storetest.NewRecorder()
	w := storetest.StartWorker(t, s, rec, outboxfeed.WorkerConfig{BatchSize: 200})
	var ids []string
	for i := range txs {
		tx, err := s.Pool().Begin(ctx)
		testenv.Must(t, err, "begin")
		rows, err := tx.Query(ctx, `INSERT INTO herald.outbox (tenant_id, channel, type, schema_version, payload)
			SELECT 'acme', 'c/' || (g % 10), 'order.updated', 1, jsonb_build_object('tx', $1::int, 'g', g)
			FROM generate_series(1, $2::int) g ORDER BY g RETURNING id::text`, i, perTx)
		testenv.Must(t, err, "insert")
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		testenv.Must(t, err, "collect ids")
		testenv.Must(t, tx.Commit(ctx), "commit")
		ids = append(ids, got...)
	}
	staged := time.Now()
	rec.WaitFor(t, 5*time.Minute, "the other transactions' records", func() bool { return storetest.Delivered(rec, ids) })
	t.Logf("%d records staged in %d transactions and drained %v after the last commit, beside a transaction open since %v",
		len(ids), txs, time.Since(staged).Round(time.Millisecond), time.Since(opened).Round(time.Second))
	storetest.ExactlyOnce(t, rec, ids)
	// The long transaction holds the xmin horizon for a minute in all.
	time.Sleep(time.Until(opened.Add(held)))
	// Its xid holds the horizon: no row version newer than it can be
	// vacuumed away meanwhile.
	var xid *string
	testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT min(backend_xid::text) FROM pg_stat_activity
		WHERE datname = current_database() AND backend_xid IS NOT NULL`).Scan(&xid), "xmin horizon")
	if xid == nil {
		t.Fatal("no open transaction holds the xmin horizon")
	}
	storetest.Eventually(t, 10*time.Second, "their completion", func() bool { return w.Outcomes(outboxfeed.OutcomeSuccess) >= float64(len(ids)) })
	// Still open, still invisible: nothing of it was published.
	if _, ok := rec.ByID(longIDs[0]); ok {
		t.Fatal("an uncommitted record was published")
	}
	testenv.Must(t, long.Commit(ctx), "commit the long transaction")
	rec.WaitFor(t, 5*time.Second, "the long transaction's record", func() bool { _, ok := rec.ByID(longIDs[0]); return ok })
	storetest.EventuallyIn[outboxfeed.Dispatched](t, 5*time.Second, "its completion", s, longIDs[0])
	storetest.ExactlyOnce(t, rec, append(ids, longIDs[0]))
	st, err := s.Stats(ctx)
	testenv.Must(t, err, "stats")
	if st.Pending != 0 {
		t.Fatalf("stats after all delivered = %+v", st)
	}
}

// The retry queue and the partition leases refuse impossible states.
func TestPostgresCheckConstraints(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	id, err := stageOne(ctx, s, storetest.Note("orders/1", `{}`))
	testenv.Must(t, err, "stage")
	b, err := s.Claim(ctx, outboxfeed.ClaimRequest{Owner: "w", Partition: outboxfeed.AnyPartition, Limit: 10, Lease: time.Hour})
	testenv.Must(t, err, "claim")
	if b == nil || len(b.Records) != 1 {
		t.Fatalf("claim = %+v", b)
	}
	held, _, err := s.Complete(ctx, b, []outboxfeed.Outcome{{Kind: outboxfeed.OutcomeRetryLater, Delay: time.Hour, Err: "busy"}}, nil)
	if err != nil || !held {
		t.Fatalf("complete = %v, %v", held, err)
	}
	if p, ok := storetest.StateOf(t, s, id).(outboxfeed.Pending); !ok || p.Attempt != 1 || p.LastError != "busy" {
		t.Fatalf("queued record = %#v", storetest.StateOf(t, s, id))
	}
	exec := func(q string, args ...any) error {
		_, err := s.Pool().Exec(ctx, q, args...)
		return err
	}
	for _, set := range []string{
		"state = 'processing'",     // no per-record claims any more
		"state = 'lost'",           // unknown state
		"attempt = -1",             // negative attempt
		"dispatched_at = now()",    // pending with dispatched_at
		"dead_lettered_at = now()", // pending with dead_lettered_at
		"state = 'dispatched'",     // no dispatched_at
		"state = 'dispatched', dispatched_at = now(), dead_lettered_at = now()",
		"state = 'dead_letter', last_error = 'x'",                            // no dead_lettered_at
		"state = 'dead_letter', dead_lettered_at = now(), last_error = NULL", // no reason
		"state = 'dead_letter', dead_lettered_at = now(), dispatched_at = now()",
	} {
		if err := exec(`UPDATE herald.outbox_retry SET `+set+` WHERE id = $1`, id); err == nil {
			t.Errorf("outbox_retry: UPDATE SET %s was accepted", set)
		}
	}
	if p, ok := storetest.StateOf(t, s, id).(outboxfeed.Pending); !ok || p.Attempt != 1 {
		t.Fatalf("record changed: %#v", storetest.StateOf(t, s, id))
	}
	if err := exec(`UPDATE herald.outbox_retry SET state = 'dead_letter', dead_lettered_at = now(), last_error = 'by hand' WHERE id = $1`, id); err != nil {
		t.Fatalf("valid transition refused: %v", err)
	}
	if dl, ok := storetest.StateOf(t, s, id).(outboxfeed.DeadLetter); !ok || dl.Reason != "by hand" || dl.Attempts != 1 {
		t.Fatalf("state = %#v", storetest.StateOf(t, s, id))
	}
	part := b.Partition
	for _, set := range []string{
		"owner = 'w'",                            // a lease without expiry
		"expires_at = now() + interval '1 hour'", // an expiry without owner
		"open = true",                            // an open batch nobody holds
	} {
		if err := exec(`UPDATE herald.outbox_partition SET `+set+` WHERE part = $1`, part); err == nil {
			t.Errorf("outbox_partition: UPDATE SET %s was accepted", set)
		}
	}
	if err := exec(`UPDATE herald.outbox_partition SET owner = 'w', expires_at = now() + interval '1 hour', open = true WHERE part = $1`, part); err != nil {
		t.Fatalf("a consistent lease refused: %v", err)
	}
	if err := exec(`UPDATE herald.outbox_partition SET owner = NULL WHERE part = $1`, part); err == nil {
		t.Error("outbox_partition: dropping the owner of an open lease was accepted")
	}
}

// stageOne stages n in a transaction of its own and wakes this process's
// Workers.
func stageOne(ctx context.Context, s *Store, n stage.Notification) (string, error) {
	var id string
	err := pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
		var err error
		id, err = stage.Stage(ctx, tx, n)
		return err
	})
	if err != nil {
		return "", err
	}
	s.Notify()
	return id, nil
}

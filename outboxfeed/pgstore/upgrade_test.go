package pgstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/heraldgw/herald/outboxfeed/stage"
	"github.com/heraldgw/herald/outboxfeed/storetest"

	"github.com/heraldgw/herald/outboxfeed"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/internal/testenv"
)

// TestPostgresUpgradeFromPerRecordSchema takes a database of the
// per-record schema (migrations 1 and 2) holding records in every state to
// the batch schema: what was pending or processing is delivered exactly
// once and in order per channel, what was dispatched is not delivered
// again, dead letters stay dead letters (and replay), a record waiting for
// its retry keeps its attempts and holds back its channel.
func TestPostgresUpgradeFromPerRecordSchema(t *testing.T) {
	ctx := context.Background()
	s, _ := newPGStoreAt(t, 2) // the per-record schema

	ins := func(channel, state string, attempt int, extra string) string {
		t.Helper()
		var id string
		q := fmt.Sprintf(`INSERT INTO herald.outbox (tenant_id, channel, type, schema_version, payload, state, attempt %s)
			VALUES ('acme', $1, 'order.updated', 1, '{"n":1}', $2, $3 %s) RETURNING id::text`, extra, map[string]string{
			"":                                       ``,
			", lease_owner, lease_expires_at, fence": `, 'old-worker', now() - interval '1 minute', 7`,
			", dispatched_at":                        `, now() - interval '1 hour'`,
			", last_error, dead_lettered_at":         `, 'no reader for order.updated v1', now()`,
			", last_error, next_attempt_at":          `, 'broker said no', now() + interval '300 milliseconds'`,
		}[extra])
		testenv.Must(t, s.Pool().QueryRow(ctx, q, channel, state, attempt).Scan(&id), "insert "+state)
		return id
	}
	dispatched := ins("a", outboxfeed.StateDispatched, 0, ", dispatched_at")
	pendA := ins("a", outboxfeed.StatePending, 0, "")
	procA := ins("a", outboxfeed.StateProcessing, 0, ", lease_owner, lease_expires_at, fence")
	dead := ins("b", outboxfeed.StateDeadLetter, 1, ", last_error, dead_lettered_at")
	pendB := ins("b", outboxfeed.StatePending, 0, "")
	retryC := ins("c", outboxfeed.StatePending, 2, ", last_error, next_attempt_at")
	laterC := ins("c", outboxfeed.StatePending, 0, "")

	// Other transactions of the cluster take xids and commit while the
	// migration runs: the position it starts from must still leave its
	// own records undone, whatever completed after its xid was assigned.
	stop, churned := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		defer func() { churned <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := s.Pool().Exec(ctx, `SELECT pg_current_xact_id()`); err == nil {
				n++
			}
		}
	}()
	testenv.Must(t, s.Migrate(ctx), "migrate to the batch schema")
	close(stop)
	t.Logf("%d transactions committed beside the migration", <-churned)
	for id, want := range map[string]string{dispatched: outboxfeed.StateDispatched, dead: outboxfeed.StateDeadLetter, pendA: outboxfeed.StatePending,
		procA: outboxfeed.StatePending, pendB: outboxfeed.StatePending, retryC: outboxfeed.StatePending, laterC: outboxfeed.StatePending} {
		if got := storetest.StateOf(t, s, id).Name(); got != want {
			t.Fatalf("%s after the upgrade: %s, want %s", id, got, want)
		}
	}
	if p := storetest.StateOf(t, s, retryC).(outboxfeed.Pending); p.Attempt != 2 || p.LastError != "broker said no" {
		t.Fatalf("record waiting for its retry after the upgrade: %+v", p)
	}
	// A producer's insert after the upgrade, by plain SQL.
	var after string
	testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT herald.stage_notification('acme', 'c', 'order.updated', 1, '{"n":2}')::text`).Scan(&after), "stage after")

	rec := storetest.NewRecorder()
	storetest.StartWorker(t, s, rec, outboxfeed.WorkerConfig{})
	want := map[string][]string{"a": {pendA, procA}, "b": {pendB}, "c": {retryC, laterC, after}}
	rec.WaitFor(t, 10*time.Second, "every record not yet dispatched", func() bool { return rec.Count() >= 6 })
	storetest.Eventually(t, 10*time.Second, "all dispatched", func() bool {
		for _, ids := range want {
			for _, id := range ids {
				if _, ok := storetest.StateOf(t, s, id).(outboxfeed.Dispatched); !ok {
					return false
				}
			}
		}
		return true
	})
	for ch, ids := range want {
		got := rec.Channel(fanout.Key{Tenant: "acme", Channel: ch})
		if fmt.Sprint(got) != fmt.Sprint(ids) {
			t.Fatalf("channel %s got %v, want %v (each once, in order)", ch, got, ids)
		}
	}
	if _, ok := rec.ByID(dispatched); ok {
		t.Fatalf("a record dispatched before the upgrade was published again")
	}
	if _, ok := storetest.StateOf(t, s, dead).(outboxfeed.DeadLetter); !ok {
		t.Fatalf("dead letter after the upgrade: %#v", storetest.StateOf(t, s, dead))
	}
	a, _ := outboxfeed.AdminOf(s)
	res, err := a.Replay(ctx, outboxfeed.ReplayRequest{IDs: []string{dead}, Actor: "ops", Reason: "upgrade check"})
	testenv.Must(t, err, "replay")
	if len(res.Replayed) != 1 {
		t.Fatalf("replay: %+v", res)
	}
	rec.WaitFor(t, 10*time.Second, "the replayed dead letter", func() bool { _, ok := rec.ByID(dead); return ok })
	// An insert a producer still had queued on the old table is forwarded
	// (its RETURNING then returns no row: the row went elsewhere).
	_, err = s.Pool().Exec(ctx, `INSERT INTO herald.outbox_v2 (tenant_id, channel, type, schema_version, payload)
		VALUES ('acme', 'd', 'order.updated', 1, '{}')`)
	testenv.Must(t, err, "insert into the old table")
	var n int
	testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT count(*) FROM herald.outbox_v2`).Scan(&n), "count old")
	if n != 0 {
		t.Fatalf("the old table kept %d rows", n)
	}
	rec.WaitFor(t, 10*time.Second, "a record inserted into the old table", func() bool {
		return len(rec.Channel(fanout.Key{Tenant: "acme", Channel: "d"})) == 1
	})
}

// TestPostgresUpgradeMidRange takes a database of migration 5, whose
// Workers read a range in (xid, seq) order, with a partition stopped in
// the middle of a range, records waiting in the retry queue and a claim
// left open, to the ranges in staging order: every
// record not yet delivered is delivered once, in order per channel; none
// delivered before is delivered again.
func TestPostgresUpgradeMidRange(t *testing.T) {
	ctx := context.Background()
	s, _ := newPGStoreAt(t, 5)
	pa, pb := partitionOf(t, s, "acme", "a"), partitionOf(t, s, "acme", "e")
	if pa == pb {
		t.Fatalf("channels a and e share partition %d; the test wants two", pa)
	}
	type claimed struct {
		fence int64
		seqs  []int64
		xids  []string
		ids   []string
	}
	// oldClaim claims partition part with migration 5's function.
	oldClaim := func(part, limit int, lease time.Duration) claimed {
		t.Helper()
		rows, err := s.Pool().Query(ctx, `SELECT r_kind, r_fence, r_id::text, r_seq, r_xid::text
			FROM herald.outbox_claim($1, 'old-worker', $3, $2, 1)`, part, limit, lease)
		testenv.Must(t, err, "old claim")
		defer rows.Close()
		var c claimed
		for rows.Next() {
			var kind byte
			var id, xid *string
			var seq *int64
			testenv.Must(t, rows.Scan(&kind, &c.fence, &id, &seq, &xid), "scan old claim")
			if kind == 'r' {
				c.ids, c.seqs, c.xids = append(c.ids, *id), append(c.seqs, *seq), append(c.xids, *xid)
			}
		}
		testenv.Must(t, rows.Err(), "old claim rows")
		if len(c.ids) > limit { // the extra one only said there was more
			c.ids, c.seqs, c.xids = c.ids[:limit], c.seqs[:limit], c.xids[:limit]
		}
		return c
	}
	// oldComplete completes the first n records of c with migration 5's
	// function: all done, but those in failed (state pending, a retry).
	oldComplete := func(part int, c claimed, n int, rangeDone bool, failed map[int]string) {
		t.Helper()
		var seqs []int64
		var xids, states, errs []string
		var attempts []int32
		var delays []int64
		for _, i := range slices.Sorted(maps.Keys(failed)) { // in seq order: the queue keeps the channel's order
			st := failed[i]
			seqs, xids, states = append(seqs, c.seqs[i]), append(xids, c.xids[i]), append(states, st)
			attempts, delays, errs = append(attempts, 1), append(delays, 0), append(errs, "failed before the upgrade")
		}
		var held bool
		testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT herald.outbox_complete($1, 'old-worker', $2, $3, $4::text::xid8, $5, $6,
			$7, $8::text[]::xid8[], $9, $10, $11, $12, '{}', '{}', '{}', '{}', '{}')`,
			part, c.fence, rangeDone, c.xids[n-1], c.seqs[n-1], n,
			nonNil(seqs), nonNil(xids), nonNil(states), nonNil(attempts), nonNil(delays), nonNil(errs)).Scan(&held), "old complete")
		if !held {
			t.Fatal("old completion lost its lease")
		}
	}
	as := pgStage(t, s, storetest.Note("a", `{"n":1}`), storetest.Note("a", `{"n":2}`), storetest.Note("a", `{"n":3}`), storetest.Note("a", `{"n":4}`), storetest.Note("a", `{"n":5}`))
	ca := oldClaim(pa, 2, time.Minute)
	if fmt.Sprint(ca.ids) != fmt.Sprint(as[:2]) {
		t.Fatalf("old claim of a = %v, want %v", ca.ids, as[:2])
	}
	oldComplete(pa, ca, 2, false, nil) // partition a stops after a2, mid-range
	bs := pgStage(t, s, storetest.Note("e", `{"n":1}`), storetest.Note("e", `{"n":2}`), storetest.Note("e", `{"n":3}`))
	cb := oldClaim(pb, 10, time.Minute)
	oldComplete(pb, cb, 3, true, map[int]string{1: outboxfeed.StatePending, 2: outboxfeed.StatePending}) // e2 failed, e3 held behind it
	open := pgStage(t, s, storetest.Note("e", `{"n":4}`))
	oldClaim(pb, 10, 100*time.Millisecond) // an old outboxfeed.Worker claims e4 and dies

	testenv.Must(t, s.Migrate(ctx), "migrate to the current schema")
	later := pgStage(t, s, storetest.Note("a", `{"n":6}`), storetest.Note("e", `{"n":5}`))
	rec := storetest.NewRecorder()
	storetest.StartWorker(t, s, rec, outboxfeed.WorkerConfig{LeaseDuration: time.Second})
	want := map[string][]string{"a": {as[2], as[3], as[4], later[0]}, "e": {bs[1], bs[2], open[0], later[1]}}
	rec.WaitFor(t, time.Minute, "every record not yet delivered", func() bool { return rec.Count() >= 8 })
	for ch, ids := range want {
		if got := rec.Channel(fanout.Key{Tenant: "acme", Channel: ch}); fmt.Sprint(got) != fmt.Sprint(ids) {
			t.Fatalf("channel %s got %v, want %v (each once, in order)", ch, got, ids)
		}
	}
	for _, id := range []string{as[0], as[1], bs[0]} {
		if _, ok := rec.ByID(id); ok {
			t.Fatalf("record %s, delivered before the upgrade, was delivered again", id)
		}
	}
}

// TestPostgresUpgradeTypeAndFreshnessChecks takes a database of migration
// 8, whose CHECK constraints refuse a record with an invalid type or
// freshness, to migration 9, which leaves both to the Worker: such a
// record staged by plain SQL commits and is dead-lettered at once with the
// reason, beside a valid one delivered as before. Going back to 8 is
// refused, naming the record, until it is deleted; then the constraints
// refuse it again.
func TestPostgresUpgradeTypeAndFreshnessChecks(t *testing.T) {
	ctx := context.Background()
	s, _ := newPGStoreAt(t, 8)

	insert := func(typ, freshness string) (string, error) {
		var id string
		err := s.Pool().QueryRow(ctx, `INSERT INTO herald.outbox (tenant_id, channel, type, schema_version, payload, freshness)
			VALUES ('acme', 'a', $1, 1, '{"n":1}', $2::jsonb) RETURNING id::text`, typ, freshness).Scan(&id)
		return id, err
	}
	const badType, badFreshness, immediate = "Order Updated", `{"mode":"advisory"}`, `{"mode":"immediate"}`
	refused := func(version int) {
		t.Helper()
		for _, c := range [][2]string{{badType, immediate}, {"order.updated", badFreshness}} {
			var pe *pgconn.PgError
			if _, err := insert(c[0], c[1]); !errors.As(err, &pe) || pe.Code != "23514" {
				t.Fatalf("version %d: insert of type %q, freshness %s = %v, want a check violation (23514)", version, c[0], c[1], err)
			}
		}
	}
	refused(8)
	before, err := insert("order.updated", immediate)
	testenv.Must(t, err, "stage at 8")

	testenv.Must(t, s.Migrate(ctx), "migrate to the latest")
	typeID, err := insert(badType, immediate)
	testenv.Must(t, err, "stage an invalid type at 9")
	freshID, err := insert("order.updated", badFreshness)
	testenv.Must(t, err, "stage an invalid freshness at 9")
	after, err := insert("order.updated", immediate)
	testenv.Must(t, err, "stage at 9")
	// The SQL producers' function still refuses both, as Stage does.
	for _, c := range [][2]string{{badType, immediate}, {"order.updated", badFreshness}} {
		var pe *pgconn.PgError
		err := s.Pool().QueryRow(ctx, `SELECT herald.stage_notification('acme', 'a', $1, 1, '{}', freshness => $2::jsonb)`, c[0], c[1]).Scan(new(string))
		if !errors.As(err, &pe) || pe.Code != "23514" {
			t.Fatalf("stage_notification of type %q, freshness %s at 9 = %v, want a check violation (23514)", c[0], c[1], err)
		}
	}

	deadLetteredThenBack(t, s, map[string]string{typeID: "type", freshID: "freshness"}, []string{before, after}, 8)
	refused(8)
	testenv.Must(t, s.Migrate(ctx), "migrate to the latest again")
}

// deadLetteredThenBack runs a Worker until the records of invalid (id →
// what is invalid about it, which the reason names) are dead-lettered at
// once and channel acme/a has got valid, in order; then going back to
// version is refused naming each invalid record, and done once they are
// deleted.
func deadLetteredThenBack(t *testing.T, s *Store, invalid map[string]string, valid []string, version int) {
	t.Helper()
	ctx := context.Background()
	rec := storetest.NewRecorder()
	w := storetest.StartWorker(t, s, rec, outboxfeed.WorkerConfig{})
	storetest.Eventually(t, 10*time.Second, "the invalid records dead-lettered", func() bool {
		for id := range invalid {
			if _, ok := storetest.StateOf(t, s, id).(outboxfeed.DeadLetter); !ok {
				return false
			}
		}
		return true
	})
	rec.WaitFor(t, 10*time.Second, "the valid records", func() bool { return rec.Count() >= len(valid) })
	w.Stop()
	for id, want := range invalid {
		d := storetest.StateOf(t, s, id).(outboxfeed.DeadLetter)
		if d.Attempts != 1 || !strings.Contains(d.Reason, want) {
			t.Errorf("record with an invalid %s: %+v, want dead-lettered at once naming the %s", want, d, want)
		}
	}
	if got := rec.Channel(fanout.Key{Tenant: "acme", Channel: "a"}); fmt.Sprint(got) != fmt.Sprint(valid) {
		t.Errorf("channel a got %v, want %v", got, valid)
	}
	ids := slices.Collect(maps.Keys(invalid))
	err := s.MigrateTo(ctx, version)
	for _, id := range ids {
		if !errors.Is(err, outboxfeed.ErrRollbackRefused) || !strings.Contains(err.Error(), id) {
			t.Fatalf("going back to %d with the invalid records = %v, want refused naming %s", version, err, id)
		}
	}
	_, err = s.Pool().Exec(ctx, `DELETE FROM herald.outbox WHERE id = ANY($1::uuid[])`, ids)
	testenv.Must(t, err, "delete the invalid records")
	testenv.Must(t, s.MigrateTo(ctx, version), fmt.Sprint("go back to ", version))
}

// TestPostgresUpgradePartitionOfInPLpgSQL takes a database at migration 9,
// with records staged under the first mapping and, a partition count change
// in progress, under the second, to migration 10 (and back from 15, and
// forth again to the newest while the change is still in progress):
// herald.outbox_partition_of answers as before for thousands of random
// channel names, and every record staged before is delivered exactly
// once, in order per channel, with those staged after; a dropped
// handler's batches are deleted without the foreign key.
func TestPostgresUpgradePartitionOfInPLpgSQL(t *testing.T) {
	ctx := context.Background()
	s, _ := newPGStoreAt(t, 9)
	a, _ := outboxfeed.AdminOf(s)

	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(uint64(seed), 0))
	randomName := func() string {
		const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/_-.:éß漢字🙂 "
		r := []rune(alphabet)
		b := make([]rune, 1+rnd.IntN(40))
		for i := range b {
			b[i] = r[rnd.IntN(len(r))]
		}
		return string(b)
	}
	tenants, channels := make([]string, 3000), make([]string, 3000)
	for i := range tenants {
		tenants[i], channels[i] = randomName(), randomName()
	}
	partitions := func(what string) []int {
		t.Helper()
		rows, err := s.Pool().Query(ctx, `SELECT herald.outbox_partition_of(u.t, u.c)
			FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(t, c, i) ORDER BY u.i`, tenants, channels)
		testenv.Must(t, err, what)
		got, err := pgx.CollectRows(rows, pgx.RowTo[int])
		testenv.Must(t, err, what)
		return got
	}
	language := func() string {
		var l string
		testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT l.lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
			WHERE p.oid = 'herald.outbox_partition_of(text, text)'::regprocedure`).Scan(&l), "language")
		return l
	}
	same := func(what string, want []int) {
		t.Helper()
		if got := partitions(what); !slices.Equal(got, want) {
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%s: (%q, %q) maps to partition %d, was %d", what, tenants[i], channels[i], got[i], want[i])
				}
			}
		}
	}

	staged := stagedRecords{}
	stageSome := func(round int) { t.Helper(); staged.stage(t, s, 12, round) }
	// The first mapping (4 partitions from 0), then a change to 6 in
	// progress (no Worker runs): records of both mappings wait.
	first := partitions("partitions at 9")
	stageSome(0)
	testenv.Must(t, a.SetPartitions(ctx, 6), "set partitions")
	second := partitions("partitions at 9 after the change")
	if slices.Equal(first, second) {
		t.Fatal("the change of the partition count changed no channel's partition")
	}
	stageSome(1)

	testenv.Must(t, s.migrateTo(ctx, 15), "migrate to 15")
	if l := language(); l != "plpgsql" {
		t.Fatalf("herald.outbox_partition_of at 10 is in %s, want plpgsql", l)
	}
	same("partitions at 10", second)
	stageSome(2)
	testenv.Must(t, s.MigrateTo(ctx, 9), "go back to 9")
	if l := language(); l != "sql" {
		t.Fatalf("herald.outbox_partition_of back at 9 is in %s, want sql", l)
	}
	same("partitions back at 9", second)
	stageSome(3)
	testenv.Must(t, s.Migrate(ctx), "migrate to the latest again")
	same("partitions at 10 again", second)

	// The change completes and the function keeps the second mapping.
	rec, w := deliverStagedAndRepartition(t, s, staged)
	stageSome(4)
	total := staged.count()
	rec.WaitFor(t, time.Minute, "the records staged after the change", func() bool { return rec.Count() >= total })
	w.Stop()
	staged.deliveredOnce(t, rec)
	same("partitions after the change completed", second)
	if l := language(); l != "sql" {
		t.Fatalf("herald.outbox_partition_of at 16 is in %s, want sql (the insert trigger inlines it)", l)
	}

	// The batch log has no foreign key to the handlers any more; a
	// dropped handler's batches still go with it.
	created, err := s.RegisterHandler(ctx, outboxfeed.HandlerSpec{Name: "gone-soon", Type: "webhook", Start: outboxfeed.StartRetained})
	if err != nil || !created {
		t.Fatalf("register gone-soon: created %v, %v", created, err)
	}
	gone := storetest.NewRecorder()
	gw := storetest.StartDeliveryWorker(t, s.ForHandler("gone-soon"), gone, outboxfeed.WorkerConfig{Handler: "gone-soon", BatchSize: 5})
	gone.WaitFor(t, time.Minute, "gone-soon's records", func() bool { return gone.Count() >= total })
	gw.Stop()
	batches := func() int {
		var n int
		testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT count(*) FROM herald.outbox_batch WHERE handler = 'gone-soon'`).Scan(&n), "count batches")
		return n
	}
	if n := batches(); n == 0 {
		t.Fatal("gone-soon logged no batch")
	}
	testenv.Must(t, s.DropHandler(ctx, "gone-soon"), "drop gone-soon")
	if n := batches(); n != 0 {
		t.Fatalf("%d batches of the dropped handler gone-soon left", n)
	}
}

// stagedRecords are the ids of the records a test staged, by channel, in
// staging order.
type stagedRecords map[fanout.Key][]string

// stage stages a record of round on each of channels c/0, c/1, … of
// tenant acme.
func (st stagedRecords) stage(t *testing.T, s *Store, channels, round int) {
	t.Helper()
	for c := range channels {
		k := fanout.Key{Tenant: "acme", Channel: fmt.Sprintf("c/%d", c)}
		id, err := stageOne(context.Background(), s, storetest.Note(k.Channel, fmt.Sprintf(`{"round":%d}`, round)))
		testenv.Must(t, err, "stage")
		st[k] = append(st[k], id)
	}
}

// count is how many records were staged.
func (st stagedRecords) count() int {
	n := 0
	for _, ids := range st {
		n += len(ids)
	}
	return n
}

// deliveredOnce checks that rec got every staged record once, in order
// per channel, and nothing else.
func (st stagedRecords) deliveredOnce(t *testing.T, rec *storetest.Recorder) {
	t.Helper()
	if n := st.count(); rec.Count() != n {
		t.Errorf("%d publishes, want %d (each record once)", rec.Count(), n)
	}
	for k, want := range st {
		if got := rec.Channel(k); !slices.Equal(got, want) {
			t.Errorf("channel %s got %v, want %v", k.Channel, got, want)
		}
	}
}

// repartitionBound bounds a wait for a change of the partition count to
// complete (and for records of the new mapping, which wait for it): a
// failure bound, not a budget. The change waits for every transaction
// open in the cluster when it began to end, in any database (xids and
// snapshots are the cluster's), and on the shared test cluster another
// test may hold one open for a minute or more
// (TestPostgresLongTransactionDoesNotStall, in this run or another
// checkout's).
const repartitionBound = 5 * time.Minute

// deliverStagedAndRepartition starts a Worker (batches of 5) publishing to
// a new Recorder and waits until it has published every staged record and
// the change of the partition count in progress has completed; the
// Worker goes on running.
func deliverStagedAndRepartition(t *testing.T, s *Store, staged stagedRecords) (*storetest.Recorder, *storetest.Worker) {
	t.Helper()
	rec := storetest.NewRecorder()
	w := storetest.StartWorker(t, s, rec, outboxfeed.WorkerConfig{BatchSize: 5})
	total := staged.count()
	rec.WaitFor(t, repartitionBound, "every staged record", func() bool { return rec.Count() >= total })
	storetest.Eventually(t, repartitionBound, "the change of the partition count completed", func() bool {
		var changing bool
		testenv.Must(t, s.Pool().QueryRow(context.Background(), `SELECT bool_or(state IN ('retiring', 'waiting')) FROM herald.outbox_partition`).Scan(&changing), "partition states")
		return !changing
	})
	return rec, w
}

// TestPostgresUpgradeKindAndVersionChecks takes a database at migration
// 11, with segments made there (each holding the constraints as its own),
// to migration 12 and back: at 12 the outbox, its segments and its archive
// accept any kind and schema_version, the SQL producers' function still
// refuses a version below 1, the Worker dead-letters the invalid records at
// once and delivers the others, records staged before the upgrade
// included; going back is refused while an invalid record is kept.
func TestPostgresUpgradeKindAndVersionChecks(t *testing.T) {
	ctx := context.Background()
	s, _ := newPGStoreAt(t, 11)
	_, err := s.KeepSegments(ctx, 1000, time.Hour, time.Minute)
	testenv.Must(t, err, "make segments at 11")

	insert := func(kind string, version int) (string, error) {
		var id string
		err := s.Pool().QueryRow(ctx, `INSERT INTO herald.outbox (tenant_id, channel, type, schema_version, payload, kind)
			VALUES ('acme', 'a', 'order.updated', $2, '{"n":1}', $1) RETURNING id::text`, kind, version).Scan(&id)
		return id, err
	}
	const badKind, badVersion = "email", 0
	refused := func(version int) {
		t.Helper()
		for _, c := range []struct {
			kind    string
			version int
		}{{badKind, 1}, {stage.KindNotification, badVersion}} {
			var pe *pgconn.PgError
			if _, err := insert(c.kind, c.version); !errors.As(err, &pe) || pe.Code != "23514" {
				t.Fatalf("schema %d: insert of kind %q, schema_version %d = %v, want a check violation (23514)", version, c.kind, c.version, err)
			}
		}
	}
	refused(11)
	before, err := insert(stage.KindNotification, 1)
	testenv.Must(t, err, "stage at 11")

	testenv.Must(t, s.Migrate(ctx), "migrate to the latest")
	var left []string
	testenv.Must(t, pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT c.conrelid::regclass::text || ' ' || c.conname FROM pg_constraint c
			WHERE c.conname IN ('outbox_kind', 'outbox_schema_version_positive', 'outbox_type_format', 'outbox_freshness_mode')
				AND (c.conrelid IN ('herald.outbox'::regclass, 'herald.outbox_archive'::regclass)
					OR c.conrelid IN (SELECT i.inhrelid FROM pg_inherits i
						WHERE i.inhparent IN ('herald.outbox'::regclass, 'herald.outbox_archive'::regclass)))`)
		if err != nil {
			return err
		}
		left, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	}), "list the constraints left")
	if len(left) > 0 {
		t.Fatalf("constraints left after migration 12: %v", left)
	}
	kindID, err := insert(badKind, 1)
	testenv.Must(t, err, "stage an invalid kind at 12")
	// The next one lands in the first segment made at 11.
	_, err = s.Pool().Exec(ctx, `SELECT setval('herald.outbox_record_seq', (SELECT min(from_seq) FROM herald.outbox_segment))`)
	testenv.Must(t, err, "move the record sequence into the first segment")
	versionID, err := insert(stage.KindNotification, badVersion)
	testenv.Must(t, err, "stage an invalid schema_version at 12, into a segment")
	var segment string
	testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT tableoid::regclass::text FROM herald.outbox WHERE id = $1::uuid`, versionID).Scan(&segment), "find its table")
	if segment == "herald.outbox_default" {
		t.Fatalf("the record meant for a segment went to %s", segment)
	}
	after, err := insert(stage.KindIntegrationEvent, 2)
	testenv.Must(t, err, "stage at 12")
	var pe *pgconn.PgError
	err = s.Pool().QueryRow(ctx, `SELECT herald.stage_notification('acme', 'a', 'order.updated', 0, '{}')`).Scan(new(string))
	if !errors.As(err, &pe) || pe.Code != "23514" {
		t.Fatalf("stage_notification of schema_version 0 at 12 = %v, want a check violation (23514)", err)
	}

	deadLetteredThenBack(t, s, map[string]string{kindID: "kind", versionID: "order.updated v0"}, []string{before, after}, 11)
	refused(11)
	testenv.Must(t, s.Migrate(ctx), "migrate to the latest again")
}

// TestPostgresUpgradeWakeupInASequence takes a database at migration 12
// whose wake-up switch a Worker has armed to migration 13 and back: the
// arming carries over, a producer's commit sends the NOTIFY while the
// switch is armed and none once it is disarmed, and going back leaves the
// switch working from the table again.
func TestPostgresUpgradeWakeupInASequence(t *testing.T) {
	ctx := context.Background()
	s, url := newPGStoreAt(t, 12)
	probe := newNotifyProbe(t, s, url)
	next := func(what string, want bool) {
		t.Helper()
		if got := probe.stage(what, false); got != want {
			t.Fatalf("%s: the producer's commit sent a NOTIFY: %v, want %v", what, got, want)
		}
	}
	exec := func(what, sql string, args ...any) {
		t.Helper()
		_, err := s.Pool().Exec(ctx, sql, args...)
		testenv.Must(t, err, what)
	}
	hour := time.Hour.Microseconds()
	next("at 12, disarmed", false)
	exec("arm at 12", pgArm, hour)
	next("at 12, armed", true)

	testenv.Must(t, s.Migrate(ctx), "migrate to the latest")
	next("armed at 12, at 13", true)
	exec("disarm at 13", pgDisarm)
	next("at 13, disarmed", false)
	// An arming rolled back is not copied.
	tx, err := s.Pool().Begin(ctx)
	testenv.Must(t, err, "begin")
	_, err = tx.Exec(ctx, pgArm, hour)
	testenv.Must(t, err, "arm, to roll back")
	testenv.Must(t, tx.Rollback(ctx), "roll back the arming")
	next("at 13, an arming rolled back", false)
	exec("arm at 13", pgArm, hour)
	next("at 13, armed", true)
	// An arming that lapsed sends none.
	exec("let the arming lapse", `UPDATE herald.outbox_wakeup SET armed_until = statement_timestamp() - interval '1 second'`)
	next("at 13, lapsed", false)

	testenv.Must(t, s.MigrateTo(ctx, 12), "go back to 12")
	next("back at 12, lapsed", false)
	exec("arm back at 12", pgArm, hour)
	next("back at 12, armed", true)
	testenv.Must(t, s.Migrate(ctx), "migrate to the latest again")
	next("armed at 12, at 13 again", true)
}

// TestPostgresUpgradeWakeupTriggerWhenArmed: migration 14 gives the
// installed wake-up trigger a WHEN condition (the switch's copy not 0),
// leaves a schema without the trigger without it, and its down step
// takes the condition away again (up to 15: migration 16 makes it a row
// trigger); each way a commit sends a NOTIFY
// exactly when a Worker has armed the switch and herald.notify is not
// off.
func TestPostgresUpgradeWakeupTriggerWhenArmed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, url := newPGStoreAt(t, 13)
	probe := newNotifyProbe(t, s, url)
	triggerDef := func() string {
		t.Helper()
		var def *string
		testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT pg_get_triggerdef(oid) FROM pg_trigger
			WHERE tgrelid = 'herald.outbox'::regclass AND tgname = 'outbox_notify'`).Scan(&def), "read the trigger")
		return *def
	}
	wantWhen := func(at string, want bool) {
		t.Helper()
		if got := strings.Contains(triggerDef(), "WHEN"); got != want {
			t.Fatalf("%s: trigger has a WHEN condition: %v, want %v: %s", at, got, want, triggerDef())
		}
	}
	check := func(at string) {
		t.Helper()
		exec := func(what, sql string, args ...any) {
			t.Helper()
			_, err := s.Pool().Exec(ctx, sql, args...)
			testenv.Must(t, err, at+": "+what)
		}
		exec("disarm", pgDisarm)
		if probe.stage(at+", disarmed", false) {
			t.Fatalf("%s: a commit sent a NOTIFY while disarmed", at)
		}
		exec("arm", pgArm, time.Hour.Microseconds())
		if !probe.stage(at+", armed", false) {
			t.Fatalf("%s: no NOTIFY while armed", at)
		}
		if probe.stage(at+", armed, herald.notify off", true) {
			t.Fatalf("%s: a commit with herald.notify off sent a NOTIFY", at)
		}
		exec("let the arming lapse", `UPDATE herald.outbox_wakeup SET armed_until = statement_timestamp() - interval '1 second'`)
		if probe.stage(at+", lapsed", false) {
			t.Fatalf("%s: a commit sent a NOTIFY after the arming lapsed", at)
		}
	}

	wantWhen("at 13", false)
	check("at 13")
	testenv.Must(t, s.migrateTo(ctx, 15), "migrate to 15")
	wantWhen("at 14", true)
	check("at 14")
	testenv.Must(t, s.MigrateTo(ctx, 13), "go back to 13")
	wantWhen("back at 13", false)
	check("back at 13")
	testenv.Must(t, s.migrateTo(ctx, 15), "migrate to 15 again")
	wantWhen("at 14 again", true)

	// Where the trigger is left out, migration 14 installs none, and
	// installing it later gives it the condition.
	off, _ := openPGStore(t, Config{DisableNotifyTrigger: true})
	testenv.Must(t, off.migrateTo(ctx, 13), "migrate to 13 without the trigger")
	testenv.Must(t, off.migrateTo(ctx, 15), "migrate to 15 without the trigger")
	if hasNotifyTrigger(t, off) {
		t.Fatal("migration 14 installed the trigger where it was left out")
	}
	on, err := Open(ctx, Config{URL: off.cfg.URL})
	testenv.Must(t, err, "open with the trigger")
	t.Cleanup(func() { _ = on.Close() })
	testenv.Must(t, on.migrateTo(ctx, 15), "install the trigger")
	var def string
	testenv.Must(t, on.Pool().QueryRow(ctx, `SELECT pg_get_triggerdef(oid) FROM pg_trigger
		WHERE tgrelid = 'herald.outbox'::regclass AND tgname = 'outbox_notify'`).Scan(&def), "read the trigger")
	if !strings.Contains(def, "WHEN") {
		t.Fatalf("the trigger installed at 14 has no WHEN condition: %s", def)
	}
}

// notifyProbe tells whether a producer's commit sent a NOTIFY: it stages
// a record, then sends a marker NOTIFY of its own; a listener gets
// notifications in commit order, so the first one it gets after the
// commit tells.
type notifyProbe struct {
	t        *testing.T
	s        *Store
	listener *pgx.Conn
	marker   int
}

func newNotifyProbe(t *testing.T, s *Store, url string) *notifyProbe {
	t.Helper()
	return &notifyProbe{t: t, s: s, listener: listenForWakeups(t, url)}
}

// listenForWakeups opens a connection of its own that listens for the
// wake-up trigger's NOTIFY.
func listenForWakeups(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	listener, err := pgx.Connect(ctx, url)
	testenv.Must(t, err, "connect listener")
	t.Cleanup(func() { _ = listener.Close(context.Background()) })
	_, err = listener.Exec(ctx, "LISTEN "+pgNotifyChannel)
	testenv.Must(t, err, "listen")
	return listener
}

// stage stages one record (with herald.notify off when quiet) and
// reports whether its commit sent a NOTIFY.
func (p *notifyProbe) stage(what string, quiet bool) bool {
	t := p.t
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, p.s.Pool(), func(tx pgx.Tx) error {
		if quiet {
			if _, err := tx.Exec(ctx, `SET LOCAL herald.notify = off`); err != nil {
				return err
			}
		}
		_, err := stage.Stage(ctx, tx, storetest.Note("orders/1", `{}`))
		return err
	})
	testenv.Must(t, err, "stage "+what)
	p.marker++
	marker := fmt.Sprint("marker ", p.marker)
	_, err = p.s.Pool().Exec(ctx, `SELECT pg_notify($1, $2)`, pgNotifyChannel, marker)
	testenv.Must(t, err, "send the marker")
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := p.listener.WaitForNotification(wctx)
	testenv.Must(t, err, "wait for a notification "+what)
	if n.Payload == marker {
		return false
	}
	if n.Payload != "" {
		t.Fatalf("%s: got %q, want the producer's NOTIFY or the marker", what, n.Payload)
	}
	n, err = p.listener.WaitForNotification(wctx)
	testenv.Must(t, err, "wait for the marker "+what)
	if n.Payload != marker {
		t.Fatalf("%s: got %q after the producer's NOTIFY, want the marker", what, n.Payload)
	}
	return true
}

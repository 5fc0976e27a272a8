package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/stage"

	"github.com/heraldgw/herald/fanout"
	"github.com/prometheus/client_golang/prometheus"
)

// Harness is one fresh, migrated store plus the store-specific ways the
// suite reaches around it.
type Harness struct {
	Store outboxfeed.Store
	// Table is the outbox table's qualified name (what producers insert
	// into).
	Table string
	// Stage stages ns in one producer transaction on the producer's own
	// connection (pgx.Tx + stage.Stage, or *sql.Tx + stage.StageSQL),
	// committing or rolling it back.
	Stage func(t *testing.T, commit bool, ns ...stage.Notification) []string
	// Exec runs one raw SQL statement.
	Exec func(ctx context.Context, sql string) error
	// PartitionOf is the partition a channel's records go to.
	PartitionOf func(t *testing.T, k fanout.Key) int
	// Queued counts the pending rows of a channel's retry queue.
	Queued func(t *testing.T, k fanout.Key) int
	// DueNow makes every pending retry-queue row due at once.
	DueNow func(t *testing.T)
	// StageOne stages n in a transaction of its own through the store's
	// connection and wakes this process's Workers (the store's Notify),
	// returning the id or the error.
	StageOne func(ctx context.Context, n stage.Notification) (string, error)
	// WorkerChecksTypeAndFreshness: the table accepts any type and
	// freshness, and the Worker dead-letters a record whose type or
	// freshness is invalid (PostgreSQL since schema 9); otherwise the
	// table refuses it.
	WorkerChecksTypeAndFreshness bool
	// WorkerChecksKindAndVersion: the same for the kind and the
	// schema_version (PostgreSQL since schema 12).
	WorkerChecksKindAndVersion bool
}

// Run is the store conformance suite: what every outbox store must do,
// checked through the Worker and the Store interface. setup returns a
// fresh migrated store for each subtest; subtests run in parallel.
func Run(t *testing.T, setup func(t *testing.T) *Harness) {
	// Each fn is a func(t, *Harness), run on a fresh store, or variants.
	runParallel(t, []namedCase[any]{
		{"CommittedReachesPublisherRolledBackReachesNoOne", testCommitAndRollback},
		{"StageValidatesFirst", testStageValidates},
		{"ExpiredLeaseReturnsWorkToEligible", testExpiredLease},
		{"ExpiredLeasesThenDeadLetter", testExpiredLeasesDeadLetter},
		{"LateUpdatesOfPausedWorkerAreRejected", testPausedWorkerLeaseLost},
		{"TakeoverOutlivesItsHolder", testTakeoverOutlivesItsHolder},
		{"TakeoverHeldRecordsPublishedOnce", variants(testTakeoverHeldPublishedOnce)},
		{"PerChannelOrderAcrossTwoWorkers", testOrderTwoWorkers},
		{"PermanentFailuresDeadLetter", testPermanentFailures},
		{"UnknownTypeVersionDeadLetters", testRegistryNoReader},
		{"RetryWithBackoffThenDeadLetter", testRetry},
		{"ChannelWaitingForRetryDoesNotHoldOthersBack", testBlockedHead},
		{"ChannelHeldPastABatchAfterAnOutage", testHeldPastABatchOutage},
		{"ChannelHeldPastABatchBehindARetry", testHeldPastABatchRetry},
		{"BurstHoldsBackOnlyItsPartition", testBurstFairness},
		{"BrokerOutageBurnsNoAttempt", testBrokerOutage},
		{"SlowBrokerStaysWithinLease", testSlowBrokerWithinLease},
		{"LateClaimAnswerCountsTheLeaseFromTheClaim", testLateClaimAnswer},
		{"ChannelRunsToABrokerThatTakesThem", testChannelRuns},
		{"CompleteManyServesEveryPartitionInOneStep", testCompleteMany},
		{"LeaseRenewal", variants(testLeaseRenewal)},
		{"StopCompletesWhatWasPublished", testStopCompletesPublished},
		{"StopReleasesLeases", variants(testStopReleasesLeases)},
		{"ReturnBatchesLeavesNoTakeover", testReturnBatches},
		{"CheckConstraintsRejectInvalidRecords", testCheckConstraints},
		{"WakeupDeliversWithoutPolling", testWakeup},
		{"MigrateTwice", testMigrateTwice},
		{"MetricsRegisteredAndRefreshed", testMetrics},
	}, func(t *testing.T, fn any) {
		switch fn := fn.(type) {
		case func(t *testing.T, h *Harness):
			fn(t, setup(t))
		case variants:
			fn(t, setup)
		default:
			t.Fatalf("storetest: %s: the table holds a %T, want a func(*testing.T, *Harness) or variants", t.Name(), fn)
		}
	})
}

// namedCase is a case of a table of subtests: its name and what it runs.
type namedCase[F any] struct {
	name string
	fn   F
}

// runParallel runs run(t, c.fn) for each case c as a parallel subtest of
// t named c.name.
func runParallel[F any](t *testing.T, cases []namedCase[F], run func(t *testing.T, fn F)) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			run(t, c.fn)
		})
	}
}

// variants is a case whose subtests each need a fresh store of their own.
type variants func(t *testing.T, setup func(t *testing.T) *Harness)

func testCommitAndRollback(t *testing.T, h *Harness) {
	rec := NewRecorder()
	StartWorker(t, h.Store, rec, outboxfeed.WorkerConfig{})
	occurred := time.Now().Add(-time.Minute).Truncate(time.Microsecond)
	n := stage.Notification{
		TenantID: "acme", Channel: "orders/1", Type: "order.updated", SchemaVersion: 2,
		Payload:    json.RawMessage(`{"status":"paid","total":12.5}`),
		Freshness:  json.RawMessage(`{"mode":"advisory","authority":"order-1"}`),
		OccurredAt: occurred, Kind: stage.KindIntegrationEvent,
	}
	rolledBack := h.Stage(t, false, Note("orders/1", `{"status":"ghost"}`))
	ids := h.Stage(t, true, n)
	id := ids[0]
	rec.WaitFor(t, 5*time.Second, "the committed record", func() bool { _, ok := rec.ByID(id); return ok })
	msg, _ := rec.ByID(id)
	if msg.Key != (fanout.Key{Tenant: "acme", Channel: "orders/1"}) || msg.Type != "order.updated" || msg.SchemaVersion != 2 {
		t.Fatalf("message = %+v", msg)
	}
	if !msg.Time.Equal(occurred) {
		t.Fatalf("Time = %v, want occurred_at %v", msg.Time, occurred)
	}
	if !JSONEqual(t, msg.Data, n.Payload) || !JSONEqual(t, msg.Freshness, n.Freshness) {
		t.Fatalf("Data %s / Freshness %s differ from what was staged", msg.Data, msg.Freshness)
	}
	Eventually(t, 5*time.Second, "state dispatched", func() bool {
		_, ok := StateOf(t, h.Store, id).(outboxfeed.Dispatched)
		return ok
	})
	r := MustGet(t, h.Store, id)
	if d := r.State.(outboxfeed.Dispatched); d.At.IsZero() || d.Attempt != 0 || r.Kind != stage.KindIntegrationEvent {
		t.Fatalf("dispatched record = %+v", r)
	}
	// Default freshness is delivered as {"mode":"immediate"}.
	id2 := h.Stage(t, true, Note("orders/1", `[1,2]`))[0]
	rec.WaitFor(t, 5*time.Second, "the second record", func() bool { _, ok := rec.ByID(id2); return ok })
	msg2, _ := rec.ByID(id2)
	if !JSONEqual(t, msg2.Freshness, fanout.ImmediateFreshness) || !JSONEqual(t, msg2.Data, json.RawMessage(`[1,2]`)) {
		t.Fatalf("second message = %+v", msg2)
	}
	if got := rec.Channel(msg.Key); len(got) != 2 || got[0] != id || got[1] != id2 {
		t.Fatalf("channel saw %v, want only the two committed records", got)
	}
	if _, err := h.Store.Get(context.Background(), rolledBack[0]); !errors.Is(err, outboxfeed.ErrNotFound) {
		t.Fatalf("rolled-back record: Get err = %v, want ErrNotFound", err)
	}
}

func testStageValidates(t *testing.T, h *Harness) {
	ctx := context.Background()
	bad := []stage.Notification{
		Note("bad channel", `{}`),
		{TenantID: "acme", Channel: "c", Type: "Bad", SchemaVersion: 1, Payload: json.RawMessage(`{}`)},
		{TenantID: "acme", Channel: "c", Type: "t", SchemaVersion: 0, Payload: json.RawMessage(`{}`)},
		{TenantID: "acme", Channel: "c", Type: "t", SchemaVersion: 1, Payload: json.RawMessage(`{`)},
		{ID: "not-a-uuid", TenantID: "acme", Channel: "c", Type: "t", SchemaVersion: 1, Payload: json.RawMessage(`{}`)},
	}
	for _, n := range bad {
		if _, err := h.StageOne(ctx, n); err == nil {
			t.Errorf("StageOne(%+v) succeeded", n)
		}
	}
	st, err := h.Store.Stats(ctx)
	if err != nil || st.Pending != 0 {
		t.Fatalf("stats = %+v, %v; want nothing staged", st, err)
	}
	id := "0190F0C4-1111-4222-8333-444455556666"
	got, err := h.StageOne(ctx, stage.Notification{ID: id, TenantID: "acme", Channel: "c", Type: "t", SchemaVersion: 1, Payload: json.RawMessage(`"x"`)})
	if err != nil || got != strings.ToLower(id) {
		t.Fatalf("StageOne with id = %q, %v; want the lower-case id", got, err)
	}
	if p, ok := StateOf(t, h.Store, id).(outboxfeed.Pending); !ok || p.Attempt != 0 || p.LastError != "" {
		t.Fatalf("state = %#v, want fresh Pending", p)
	}
}

// claimAny claims the next batch of any free partition for owner, failing
// the test on a store error.
func ClaimAny(t *testing.T, s outboxfeed.Store, owner string, limit int, lease time.Duration) *outboxfeed.Batch {
	t.Helper()
	b, err := s.Claim(context.Background(), outboxfeed.ClaimRequest{Owner: owner, Partition: outboxfeed.AnyPartition, Limit: limit, Lease: lease})
	if err != nil {
		t.Fatalf("claim for %s: %v", owner, err)
	}
	return b
}

// exactlyOnce fails unless rec published every id of want exactly once.
func ExactlyOnce(t *testing.T, rec *Recorder, want []string) {
	t.Helper()
	seen := map[string]int{}
	rec.mu.Lock()
	for _, m := range rec.msgs {
		seen[m.ID]++
	}
	rec.mu.Unlock()
	bad := 0
	for _, id := range want {
		if seen[id] != 1 {
			if bad++; bad <= 5 {
				t.Errorf("%s published %d times, want once", id, seen[id])
			}
		}
	}
	if bad > 5 {
		t.Errorf("... %d records in all published other than once", bad)
	}
	if len(seen) != len(want) {
		t.Errorf("published %d distinct records, want %d", len(seen), len(want))
	}
}

// delivered reports whether rec published every id of ids.
func Delivered(rec *Recorder, ids []string) bool {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	seen := make(map[string]bool, len(rec.msgs))
	for _, m := range rec.msgs {
		seen[m.ID] = true
	}
	for _, id := range ids {
		if !seen[id] {
			return false
		}
	}
	return true
}

func BatchIDs(b *outboxfeed.Batch) []string {
	ids := make([]string, len(b.Records))
	for i := range b.Records {
		ids[i] = b.Records[i].ID
	}
	return ids
}

// A Worker that claimed a batch and then died (or stalled) never completes
// it: once its lease expires the records are eligible again, and the next
// Worker publishes them as a takeover (the broker skips what the dead one
// may have published).
func testExpiredLease(t *testing.T, h *Harness) {
	const lease = time.Second
	ids := h.Stage(t, true, Note("orders/1", `{"n":1}`), Note("orders/1", `{"n":2}`))
	before := time.Now()
	dead := ClaimAny(t, h.Store, "dead", 10, lease)
	if dead == nil || fmt.Sprint(BatchIDs(dead)) != fmt.Sprint(ids) || dead.Owner != "dead" || dead.Takeover || dead.Takeovers != 0 {
		t.Fatalf("dead worker's claim = %+v, want a fresh batch of %v", dead, ids)
	}
	if st := StateOf(t, h.Store, ids[0]); time.Since(before) < lease {
		p, ok := st.(outboxfeed.Processing)
		if !ok || p.LeaseOwner != "dead" || p.Fence != dead.Fence {
			t.Fatalf("claimed record = %#v, want processing by dead at fence %d", st, dead.Fence)
		}
	}
	// Nobody else gets the partition while the lease holds. (On a machine
	// slow enough that the lease ran out first, other takes it over as
	// the Worker below would, for as long.)
	if b := ClaimAny(t, h.Store, "other", 10, lease); b != nil && time.Since(before) < lease {
		t.Fatalf("a held partition was claimed %v after the claim (lease %v): %+v", time.Since(before), lease, b)
	}
	Eventually(t, time.Minute, "the expired lease's records to be pending again", func() bool {
		_, ok := StateOf(t, h.Store, ids[0]).(outboxfeed.Pending)
		return ok
	})
	rec := NewRecorder()
	StartWorker(t, h.Store, rec, outboxfeed.WorkerConfig{})
	rec.WaitFor(t, time.Minute, "both records", func() bool { return rec.Count() >= 2 })
	if got := rec.Channel(fanout.Key{Tenant: "acme", Channel: "orders/1"}); fmt.Sprint(got) != fmt.Sprint(ids) {
		t.Fatalf("published %v, want %v once each, in order", got, ids)
	}
	msg, _ := rec.ByID(ids[0])
	if !msg.Fence.Takeover || msg.Fence.Scope == "" || msg.Fence.Value <= dead.Fence {
		t.Fatalf("first record published with fence %+v, want a takeover above the dead lease's fence %d", msg.Fence, dead.Fence)
	}
	for _, id := range ids {
		Eventually(t, time.Minute, "dispatched", func() bool {
			_, ok := StateOf(t, h.Store, id).(outboxfeed.Dispatched)
			return ok
		})
	}
	if rec.Count() != 2 {
		t.Fatalf("published %d times, want 2", rec.Count())
	}
}

// A record whose Worker dies (or stalls) every time it holds it — a
// message that crashes the process — is dead-lettered once the partition's
// lost leases use up MaxAttempts, never published by a Worker, and the
// records behind it flow again.
func testExpiredLeasesDeadLetter(t *testing.T, h *Harness) {
	ctx := context.Background()
	const lease = 20 * time.Millisecond
	poison := h.Stage(t, true, Note("orders/1", `{"crashes":true}`), Note("orders/1", `{"n":2}`))
	part := outboxfeed.AnyPartition
	for i := range 3 { // three crashed Workers: each claimed it and vanished
		var got *outboxfeed.Batch
		Eventually(t, 5*time.Second, "a crashing worker's claim", func() bool {
			var err error
			got, err = h.Store.Claim(ctx, outboxfeed.ClaimRequest{Owner: fmt.Sprintf("crasher-%d", i), Partition: part, Limit: 1, Lease: lease})
			if err != nil {
				t.Fatal(err)
			}
			return got != nil
		})
		part = got.Partition
		if len(got.Records) != 1 || got.Records[0].ID != poison[0] || got.Takeovers != i || got.Takeover != (i > 0) {
			t.Fatalf("crasher %d claimed %v with takeovers %d (takeover %v), want %s after %d takeovers",
				i, BatchIDs(got), got.Takeovers, got.Takeover, poison[0], i)
		}
	}
	rec := NewRecorder()
	w := StartWorker(t, h.Store, rec, outboxfeed.WorkerConfig{MaxAttempts: 3})
	rec.WaitFor(t, 5*time.Second, "the record after the poison one", func() bool { _, ok := rec.ByID(poison[1]); return ok })
	if _, ok := rec.ByID(poison[0]); ok {
		t.Fatal("the Worker published a record whose lost leases had used up its attempts")
	}
	Eventually(t, 5*time.Second, "the poison record dead-lettered", func() bool {
		_, ok := StateOf(t, h.Store, poison[0]).(outboxfeed.DeadLetter)
		return ok
	})
	dl := StateOf(t, h.Store, poison[0]).(outboxfeed.DeadLetter)
	if dl.Reason != "gave up after 3 attempts: its lease expired" {
		t.Fatalf("poison record = %#v, want dead-lettered after 3 lost leases", dl)
	}
	if dl.Attempts != 3 {
		t.Errorf("poison record dead-lettered with Attempts %d, reason %q: want 3, the lost leases it took", dl.Attempts, dl.Reason)
	}
	Eventually(t, 5*time.Second, "one dead_letter outcome", func() bool { return w.Outcomes(outboxfeed.OutcomeDeadLetter) == 1 })
}

// A Worker paused past its lease (GC, SIGSTOP, a hung publish) resumes
// after another holder took its partition over: its completion is refused
// and changes nothing, whatever outcomes it carries.
func testPausedWorkerLeaseLost(t *testing.T, h *Harness) {
	ctx := context.Background()
	entered, gate := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	rec := NewRecorder()
	rec.Before = func(_ context.Context, msg fanout.Message) error {
		if calls.Add(1) == 1 { // paused past its lease; ignores ctx like a stopped process
			close(entered)
			<-gate
		}
		return nil
	}
	w := StartWorker(t, h.Store, rec, outboxfeed.WorkerConfig{Lanes: 1, LeaseDuration: 200 * time.Millisecond, PublishTimeout: 100 * time.Millisecond})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release) // runs before the outboxfeed.Worker's Stop, even on failure
	ids := h.Stage(t, true, Note("orders/1", `{"n":1}`), Note("orders/1", `{"n":2}`))
	select {
	case <-entered:
	case <-time.After(time.Minute):
		t.Fatal("worker never published")
	}
	var taken *outboxfeed.Batch
	Eventually(t, time.Minute, "worker-b to take the expired lease over", func() bool {
		taken = ClaimAny(t, h.Store, "worker-b", 10, time.Hour)
		return taken != nil
	})
	if fmt.Sprint(BatchIDs(taken)) != fmt.Sprint(ids) || !taken.Takeover {
		t.Fatalf("worker-b took %v (takeover %v), want a takeover of %v", BatchIDs(taken), taken.Takeover, ids)
	}
	release()
	Eventually(t, time.Minute, "two lease_lost outcomes", func() bool {
		return w.Outcomes(outboxfeed.OutcomeLeaseLost) == 2
	})
	if s, r := w.Outcomes(outboxfeed.OutcomeSuccess), w.Outcomes(outboxfeed.OutcomeRetry); s != 0 || r != 0 {
		t.Fatalf("success %v retry %v, want 0: the stale worker's completion must change nothing", s, r)
	}
	untouched := func(when string) {
		t.Helper()
		for _, id := range ids {
			p, ok := StateOf(t, h.Store, id).(outboxfeed.Processing)
			if !ok || p.LeaseOwner != "worker-b" || p.Fence != taken.Fence || p.Attempt != 0 {
				t.Fatalf("%s: %s = %#v, want worker-b's untouched claim at fence %d", when, id, StateOf(t, h.Store, id), taken.Fence)
			}
		}
	}
	untouched("after the paused worker's completion")
	for name, late := range map[string]outboxfeed.Batch{
		"older fence": func() outboxfeed.Batch { b := *taken; b.Fence--; return b }(),
		"wrong owner": func() outboxfeed.Batch { b := *taken; b.Owner = w.Owner(); return b }(),
	} {
		for _, out := range [][]outboxfeed.Outcome{
			{{Kind: outboxfeed.OutcomeDone}, {Kind: outboxfeed.OutcomeDone}},
			{{Kind: outboxfeed.OutcomeRetryLater, Delay: time.Hour, Err: "late failure"}, {Kind: outboxfeed.OutcomeHold}},
			{{Kind: outboxfeed.OutcomeDeadLettered, Err: "late failure"}},
		} {
			held, nb, err := h.Store.Complete(ctx, &late, out, nil)
			if held || nb != nil || err != nil {
				t.Fatalf("%s: Complete(%v) = %v, %v, %v; want refused", name, out, held, nb, err)
			}
			untouched(name)
		}
	}
	held, _, err := h.Store.Complete(ctx, taken, []outboxfeed.Outcome{{Kind: outboxfeed.OutcomeDone}, {Kind: outboxfeed.OutcomeDone}}, nil)
	if !held || err != nil {
		t.Fatalf("current holder's complete = %v, %v", held, err)
	}
	for _, id := range ids {
		if d, ok := StateOf(t, h.Store, id).(outboxfeed.Dispatched); !ok || d.Attempt != 0 {
			t.Fatalf("%s = %#v, want dispatched", id, StateOf(t, h.Store, id))
		}
	}
}

func testOrderTwoWorkers(t *testing.T, h *Harness) {
	const channels, perChannel, txSize = 12, 30, 18
	rec := NewRecorder()
	rec.Before = func(context.Context, fanout.Message) error {
		time.Sleep(50 * time.Microsecond) // a network hop, so batches overlap
		return nil
	}
	cfg := outboxfeed.WorkerConfig{BatchSize: 25, Concurrency: 4, PollInterval: 5 * time.Millisecond}
	StartWorker(t, h.Store, rec, cfg)
	StartWorker(t, h.Store, rec, cfg)
	want := map[fanout.Key][]string{}
	var batch []stage.Notification
	flush := func() {
		ids := h.Stage(t, true, batch...)
		for i, n := range batch {
			k := fanout.Key{Tenant: n.TenantID, Channel: n.Channel}
			want[k] = append(want[k], ids[i])
		}
		batch = batch[:0]
	}
	for i := range perChannel {
		for c := range channels {
			tenant := "acme"
			if c%3 == 0 {
				tenant = "globex" // same channel name, another tenant
			}
			batch = append(batch, stage.Notification{TenantID: tenant, Channel: fmt.Sprintf("orders/%d", c/2),
				Type: "order.updated", SchemaVersion: 1, Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
			if len(batch) == txSize {
				flush()
			}
		}
	}
	flush()
	total := 0
	for _, ids := range want {
		total += len(ids)
	}
	var all []string
	for _, ids := range want {
		all = append(all, ids...)
	}
	rec.WaitFor(t, 30*time.Second, "every record", func() bool { return Delivered(rec, all) })
	ExactlyOnce(t, rec, all)
	for k, ids := range want {
		got := rec.Channel(k)
		if fmt.Sprint(got) != fmt.Sprint(ids) {
			t.Fatalf("channel %v: published order\n%v\nwant staged order\n%v", k, got, ids)
		}
	}
	if rec.Count() != total {
		t.Fatalf("published %d, want %d (no duplicates without crashes)", rec.Count(), total)
	}
	Eventually(t, 10*time.Second, "all dispatched", func() bool {
		st, err := h.Store.Stats(context.Background())
		return err == nil && st.Pending == 0
	})
}

func testPermanentFailures(t *testing.T, h *Harness) {
	ctx := context.Background()
	badChannel := "0190f0c4-0000-4000-8000-000000000001"
	badTenant := "0190f0c4-0000-4000-8000-000000000002"
	for _, q := range []string{
		fmt.Sprintf(`INSERT INTO %s (id, tenant_id, channel, type, schema_version, payload) VALUES ('%s', 'acme', 'orders/bad channel!', 'order.updated', 1, '{}')`, h.Table, badChannel),
		fmt.Sprintf(`INSERT INTO %s (id, tenant_id, channel, type, schema_version, payload) VALUES ('%s', 'ac/me', 'orders/1', 'order.updated', 1, '{}')`, h.Table, badTenant),
	} {
		if err := h.Exec(ctx, q); err != nil {
			t.Fatalf("raw insert: %v", err)
		}
	}
	rec := NewRecorder()
	rec.Before = func(_ context.Context, msg fanout.Message) error {
		if msg.Type == "poison.type" {
			return outboxfeed.Permanent(errors.New("rejected by target"))
		}
		return nil
	}
	w := StartWorker(t, h.Store, rec, outboxfeed.WorkerConfig{})
	poison := h.Stage(t, true, stage.Notification{TenantID: "acme", Channel: "orders/1", Type: "poison.type", SchemaVersion: 1, Payload: json.RawMessage(`{}`)})[0]
	good := h.Stage(t, true, Note("orders/1", `{"ok":true}`))[0]
	rec.WaitFor(t, 5*time.Second, "the good record after the poison one", func() bool { _, ok := rec.ByID(good); return ok })
	for id, want := range map[string]string{badChannel: "invalid channel", badTenant: "invalid tenant_id", poison: "rejected by target"} {
		Eventually(t, 5*time.Second, "dead letter "+id, func() bool {
			_, ok := StateOf(t, h.Store, id).(outboxfeed.DeadLetter)
			return ok
		})
		dl := StateOf(t, h.Store, id).(outboxfeed.DeadLetter)
		if !strings.Contains(dl.Reason, want) || dl.Attempts != 1 || dl.At.IsZero() {
			t.Fatalf("%s: dead letter = %#v, want reason containing %q after 1 attempt", id, dl, want)
		}
	}
	Eventually(t, 5*time.Second, "3 dead_letter outcomes", func() bool { return w.Outcomes(outboxfeed.OutcomeDeadLetter) == 3 })
	st, err := h.Store.Stats(ctx)
	if err != nil || st.DeadLetter != 3 {
		t.Fatalf("stats = %+v, %v", st, err)
	}
}

func testRegistryNoReader(t *testing.T, h *Harness) {
	reg, err := outboxfeed.ParseRegistry([]byte(`{"order.updated": {"versions": [1, 2]}}`))
	if err != nil {
		t.Fatal(err)
	}
	rec := NewRecorder()
	StartWorker(t, h.Store, rec, outboxfeed.WorkerConfig{Registry: reg})
	v3 := Note("orders/1", `{"v":3}`)
	v3.SchemaVersion = 3
	other := Note("orders/1", `{}`)
	other.Type = "invoice.paid"
	ids := h.Stage(t, true, Note("orders/1", `{"v":1}`), v3, other, Note("orders/1", `{"v":1}`))
	rec.WaitFor(t, 5*time.Second, "the readable records", func() bool { return rec.Count() == 2 })
	if got := rec.Channel(fanout.Key{Tenant: "acme", Channel: "orders/1"}); fmt.Sprint(got) != fmt.Sprint([]string{ids[0], ids[3]}) {
		t.Fatalf("published %v, want %v", got, []string{ids[0], ids[3]})
	}
	for i, want := range map[int]string{1: "no reader for order.updated v3", 2: "no reader for invoice.paid v1"} {
		Eventually(t, 5*time.Second, "dead letter", func() bool {
			_, ok := StateOf(t, h.Store, ids[i]).(outboxfeed.DeadLetter)
			return ok
		})
		if dl := StateOf(t, h.Store, ids[i]).(outboxfeed.DeadLetter); dl.Reason != want {
			t.Fatalf("reason = %q, want %q", dl.Reason, want)
		}
	}
}

// A channel whose first record waits for its retry holds back its own
// records only: other channels are published even when the waiting
// channel's records fill many batches ahead of them (here both channels
// share a partition).
func testBlockedHead(t *testing.T, h *Harness) {
	slow := make([]stage.Notification, 300)
	for i := range slow {
		slow[i] = Note("orders/slow", fmt.Sprintf(`{"i":%d}`, i))
	}
	slowIDs := h.Stage(t, true, slow...)
	fast := h.Stage(t, true, Note("orders/fast", `{}`))[0]
	rec := NewRecorder()
	rec.Before = func(_ context.Context, msg fanout.Message) error {
		if msg.ID == slowIDs[0] {
			return outboxfeed.Retryable(errors.New("target busy"))
		}
		return nil
	}
	// The retry waits an hour (full jitter below an hour: at worst it
	// fails again).
	StartWorker(t, h.Store, rec, outboxfeed.WorkerConfig{BatchSize: 5, RetryBaseDelay: time.Hour, RetryMaxDelay: time.Hour})
	rec.WaitFor(t, time.Minute, "the other channel's record", func() bool { _, ok := rec.ByID(fast); return ok })
	if n := len(rec.Channel(fanout.Key{Tenant: "acme", Channel: "orders/slow"})); n != 0 {
		t.Fatalf("%d records of the waiting channel were published past its first", n)
	}
	if p, ok := StateOf(t, h.Store, slowIDs[0]).(outboxfeed.Pending); !ok || p.Attempt < 1 || p.LastError != "target busy" || time.Until(p.NextAttemptAt) < 0 {
		t.Fatalf("the waiting record is %#v, want pending a retry after a failed attempt", StateOf(t, h.Store, slowIDs[0]))
	}
	for _, id := range []string{slowIDs[1], slowIDs[len(slowIDs)-1]} {
		if p, ok := StateOf(t, h.Store, id).(outboxfeed.Pending); !ok || p.Attempt != 0 || p.LastError != "" {
			t.Fatalf("a record behind the waiting one is %#v, want pending with no attempt", StateOf(t, h.Store, id))
		}
	}
}

// testBurstFairness: a burst on one channel holds back only the channels
// of its own partition. Its subscriber path stalls after the first quarter
// of the burst until the record of a channel in another partition, staged
// after the burst, is out: that record goes out meanwhile, through another
// lane, then the rest of the burst. (A store with one partition publishes
// the others right after the burst, and nothing stalls.) The burst stays
// in order.
func testBurstFairness(t *testing.T, h *Harness) {
	const burst = 2000
	hot := fanout.Key{Tenant: "acme", Channel: "orders/hot"}
	ns := make([]stage.Notification, burst)
	for i := range ns {
		ns[i] = Note(hot.Channel, fmt.Sprintf(`{"i":%d}`, i))
	}
	hotIDs := h.Stage(t, true, ns...)
	// A channel of another partition, when there is one.
	other := fanout.Key{Tenant: "acme", Channel: "orders/quiet-0"}
	for i := 1; i < 64 && h.PartitionOf(t, other) == h.PartitionOf(t, hot); i++ {
		other.Channel = fmt.Sprintf("orders/quiet-%d", i)
	}
	apart := h.PartitionOf(t, other) != h.PartitionOf(t, hot)
	others := h.Stage(t, true, Note(other.Channel, `{}`))
	rec := NewRecorder()
	otherOut := make(chan struct{})
	var hotStarted atomic.Int32
	rec.Before = func(ctx context.Context, msg fanout.Message) error {
		switch {
		case msg.Key == other:
			close(otherOut) // published once: Before returns nil
		case apart && msg.Key == hot && hotStarted.Add(1) > burst/4:
			// The stall: a Worker that served the partitions one after
			// another would leave the other record behind it for good.
			select {
			case <-otherOut:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	StartWorker(t, h.Store, rec, outboxfeed.WorkerConfig{BatchSize: 100, PollInterval: 5 * time.Millisecond})
	rec.WaitFor(t, 3*time.Minute, "the other channel's record", func() bool {
		_, ok := rec.ByID(others[0])
		return ok
	})
	t.Logf("%d of the burst's %d records went out before the record of the other channel (partitions apart: %v)", len(rec.Channel(hot)), burst, apart)
	rec.WaitFor(t, 3*time.Minute, "the whole burst", func() bool { return len(rec.Channel(hot)) >= burst })
	if got := rec.Channel(hot); fmt.Sprint(got) != fmt.Sprint(hotIDs) {
		t.Fatalf("the burst went out out of order")
	}
}

func testRetry(t *testing.T, h *Harness) {
	var flaky atomic.Int32
	rec := NewRecorder()
	rec.Before = func(_ context.Context, msg fanout.Message) error {
		switch msg.Type {
		case "flaky.type":
			if flaky.Add(1) <= 2 {
				return outboxfeed.Retryable(errors.New("target busy"))
			}
		case "always.fails":
			return outboxfeed.Retryable(errors.New("target busy"))
		}
		return nil
	}
	w := StartWorker(t, h.Store, rec, outboxfeed.WorkerConfig{MaxAttempts: 3})
	flakyN, failsN := Note("orders/1", `{"n":1}`), Note("orders/2", `{}`)
	flakyN.Type, failsN.Type = "flaky.type", "always.fails"
	ids := h.Stage(t, true, flakyN, Note("orders/1", `{"n":2}`), failsN)
	rec.WaitFor(t, 10*time.Second, "both orders/1 records", func() bool {
		return len(rec.Channel(fanout.Key{Tenant: "acme", Channel: "orders/1"})) == 2
	})
	if got := rec.Channel(fanout.Key{Tenant: "acme", Channel: "orders/1"}); got[0] != ids[0] || got[1] != ids[1] {
		t.Fatalf("order across a retry: got %v, want %v", got, ids[:2])
	}
	Eventually(t, 10*time.Second, "the failing record dead-lettered", func() bool {
		_, ok := StateOf(t, h.Store, ids[2]).(outboxfeed.DeadLetter)
		return ok
	})
	dl := StateOf(t, h.Store, ids[2]).(outboxfeed.DeadLetter)
	if dl.Attempts != 3 || dl.Reason != "gave up after 3 attempts: target busy" {
		t.Fatalf("dead letter = %#v", dl)
	}
	Eventually(t, 5*time.Second, "flaky record dispatched", func() bool {
		_, ok := StateOf(t, h.Store, ids[0]).(outboxfeed.Dispatched)
		return ok
	})
	if d := StateOf(t, h.Store, ids[0]).(outboxfeed.Dispatched); d.Attempt != 2 {
		t.Fatalf("flaky record attempts = %d, want 2", d.Attempt)
	}
	if r := w.Outcomes(outboxfeed.OutcomeRetry); r != 4 {
		t.Fatalf("retry outcomes = %v, want 4 (2 flaky + 2 before giving up)", r)
	}
}

func testBrokerOutage(t *testing.T, h *Harness) {
	rec, down := FailingRecorder(ErrBrokerDown)
	w := StartWorker(t, h.Store, rec, outboxfeed.WorkerConfig{MaxAttempts: 1, OutageMaxDelay: quickOutageRetry})
	ids := h.Stage(t, true, Note("orders/1", `{"n":1}`), Note("orders/2", `{"n":2}`), Note("orders/1", `{"n":3}`))
	rec.WaitFor(t, time.Minute, "several failed publishes", func() bool { return rec.CallCount() >= 6 })
	for _, id := range ids {
		r := MustGet(t, h.Store, id)
		switch r.State.(type) {
		case outboxfeed.Pending, outboxfeed.Processing:
		default:
			t.Fatalf("%s: state %s during a broker outage", id, r.State.Name())
		}
		if r.Attempt != 0 {
			t.Fatalf("%s: attempt %d, want 0: a broker outage burns no attempt", id, r.Attempt)
		}
	}
	down.Store(false)
	rec.WaitFor(t, time.Minute, "delivery after the outage", func() bool { return rec.Count() == 3 })
	if got := rec.Channel(fanout.Key{Tenant: "acme", Channel: "orders/1"}); got[0] != ids[0] || got[1] != ids[2] {
		t.Fatalf("order after outage = %v", got)
	}
	for _, id := range ids {
		Eventually(t, time.Minute, "dispatched", func() bool {
			d, ok := StateOf(t, h.Store, id).(outboxfeed.Dispatched)
			return ok && d.Attempt == 0
		})
	}
	if r, d := w.Outcomes(outboxfeed.OutcomeRetry), w.Outcomes(outboxfeed.OutcomeDeadLetter); r != 0 || d != 0 {
		t.Fatalf("retry %v dead_letter %v during a broker outage, want 0", r, d)
	}
}

// Stop cuts off the in-flight publish, completes what the broker accepted
// and gives the rest back with no attempt burnt.
func testStopCompletesPublished(t *testing.T, h *Harness) {
	entered := make(chan struct{})
	var calls atomic.Int32
	rec := NewRecorder()
	rec.Before = func(ctx context.Context, _ fanout.Message) error {
		if calls.Add(1) == 2 {
			close(entered)
			<-ctx.Done() // an in-flight publish cut off by Stop
			return ctx.Err()
		}
		return nil
	}
	w := StartWorker(t, h.Store, rec, outboxfeed.WorkerConfig{})
	if err := w.Start(context.Background()); !errors.Is(err, outboxfeed.ErrStarted) {
		t.Fatalf("second Start = %v, want ErrStarted", err)
	}
	ids := h.Stage(t, true, Note("orders/1", `{"n":1}`), Note("orders/1", `{"n":2}`), Note("orders/1", `{"n":3}`))
	select {
	case <-entered:
	case <-time.After(time.Minute):
		t.Fatal("second publish never started")
	}
	w.Stop()
	w.Stop()
	if err := w.Start(context.Background()); !errors.Is(err, outboxfeed.ErrStopped) {
		t.Fatalf("Start after Stop = %v, want ErrStopped", err)
	}
	if w.Ready() {
		t.Fatal("a stopped worker reports ready")
	}
	if _, ok := StateOf(t, h.Store, ids[0]).(outboxfeed.Dispatched); !ok {
		t.Fatalf("the record published before Stop is %s, want dispatched", StateOf(t, h.Store, ids[0]).Name())
	}
	for _, id := range ids[1:] {
		p, ok := StateOf(t, h.Store, id).(outboxfeed.Pending)
		if !ok || p.Attempt != 0 {
			t.Fatalf("%s after Stop = %#v, want given back: pending with attempt 0", id, StateOf(t, h.Store, id))
		}
	}
	// Stop before Start is fine too.
	idle, err := outboxfeed.NewWorker(h.Store, rec, outboxfeed.WorkerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	idle.Stop()
}

// The outbox table refuses records producers could not stage (or, where
// the Worker checks the type and freshness, or the kind and version, the
// Worker dead-letters them at once); plain SQL producers get the column
// defaults.
func testCheckConstraints(t *testing.T, h *Harness) {
	ctx := context.Background()
	id, err := h.StageOne(ctx, Note("orders/1", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	where := fmt.Sprintf(" WHERE id = '%s'", id)
	var refused, workerChecked []string
	typeAndFreshness := []string{
		"type = 'Order Updated'",
		"type = ''",
		`freshness = '{"mode":"advisory"}'`,
		`freshness = '{"mode":"eventually"}'`,
	}
	kindAndVersion := []string{"schema_version = 0", "kind = 'email'"}
	for _, c := range []struct {
		sets          []string
		byTheWorkerOK bool
	}{{typeAndFreshness, h.WorkerChecksTypeAndFreshness}, {kindAndVersion, h.WorkerChecksKindAndVersion}} {
		if c.byTheWorkerOK {
			workerChecked = append(workerChecked, c.sets...)
		} else {
			refused = append(refused, c.sets...)
		}
	}
	for _, set := range refused {
		if err := h.Exec(ctx, "UPDATE "+h.Table+" SET "+set+where); err == nil {
			t.Errorf("UPDATE SET %s was accepted", set)
		}
	}
	if r := MustGet(t, h.Store, id); r.SchemaVersion != 1 || r.Type != "order.updated" || r.Kind != stage.KindNotification {
		t.Fatalf("record changed: %+v", r)
	}
	if _, ok := StateOf(t, h.Store, id).(outboxfeed.Pending); !ok {
		t.Fatal("record changed state")
	}
	// Plain SQL producers get the column defaults, id included.
	plain := "0190f0c4-0000-4000-8000-0000000000aa"
	if err := h.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (id, tenant_id, channel, type, schema_version, payload) VALUES ('%s', 'acme', 'orders/9', 'order.updated', 1, '{"a":1}')`, h.Table, plain)); err != nil {
		t.Fatal(err)
	}
	r := MustGet(t, h.Store, plain)
	if r.Kind != stage.KindNotification || !JSONEqual(t, r.Freshness, fanout.ImmediateFreshness) || time.Since(r.OccurredAt) > time.Minute {
		t.Fatalf("defaults = %+v", r)
	}
	if _, ok := r.State.(outboxfeed.Pending); !ok {
		t.Fatalf("plain insert state = %#v", r.State)
	}
	if err := h.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (tenant_id, channel, type, schema_version, payload) VALUES ('acme', 'orders/9', 'order.updated', 1, '{}')`, h.Table)); err != nil {
		t.Fatalf("insert without id: %v", err)
	}
	// A record the table accepts but the Worker cannot deliver: one per
	// invalid type, freshness, kind or version the Worker checks, each
	// dead-lettered at once.
	var bad []string
	for i, set := range workerChecked {
		badID := fmt.Sprintf("0190f0c4-0000-4000-8000-0000000001%02d", i)
		if err := h.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (id, tenant_id, channel, type, schema_version, payload) VALUES ('%s', 'acme', 'orders/bad%d', 'order.updated', 1, '{}')`, h.Table, badID, i)); err != nil {
			t.Fatal(err)
		}
		if err := h.Exec(ctx, "UPDATE "+h.Table+" SET "+set+fmt.Sprintf(" WHERE id = '%s'", badID)); err != nil {
			t.Fatalf("UPDATE SET %s: %v", set, err)
		}
		bad = append(bad, badID)
	}
	// The valid ones are delivered, the others dead-lettered.
	rec := NewRecorder()
	StartWorker(t, h.Store, rec, outboxfeed.WorkerConfig{})
	rec.WaitFor(t, 5*time.Second, "the three records", func() bool { return rec.Count() == 3 })
	for i, badID := range bad {
		Eventually(t, 5*time.Second, "a record with "+workerChecked[i]+" dead-lettered", func() bool {
			_, ok := StateOf(t, h.Store, badID).(outboxfeed.DeadLetter)
			return ok
		})
		if d := StateOf(t, h.Store, badID).(outboxfeed.DeadLetter); d.Attempts != 1 || d.Reason == "" {
			t.Errorf("record with %s: %+v, want dead-lettered at its first attempt with a reason", workerChecked[i], d)
		}
		if _, ok := rec.ByID(badID); ok {
			t.Errorf("record with %s was published", workerChecked[i])
		}
	}
}

func testWakeup(t *testing.T, h *Harness) {
	rec := NewRecorder()
	w := StartWorker(t, h.Store, rec, outboxfeed.WorkerConfig{PollInterval: WakeupsOnly})
	Eventually(t, time.Minute, "worker ready", w.Ready)
	for i := range 3 {
		start := time.Now()
		id, err := h.StageOne(context.Background(), Note("orders/1", fmt.Sprintf(`{"i":%d}`, i)))
		if err != nil {
			t.Fatal(err)
		}
		rec.WaitFor(t, time.Minute, "a woken delivery", func() bool { _, ok := rec.ByID(id); return ok })
		t.Logf("record %d delivered %v after staging", i, time.Since(start))
	}
}

func testMigrateTwice(t *testing.T, h *Harness) {
	ctx := context.Background()
	id, err := h.StageOne(ctx, Note("orders/1", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := h.Store.Migrate(ctx); err != nil {
			t.Fatalf("migrate again: %v", err)
		}
	}
	if _, ok := StateOf(t, h.Store, id).(outboxfeed.Pending); !ok {
		t.Fatal("record lost by a repeated Migrate")
	}
}

func testMetrics(t *testing.T, h *Harness) {
	reg := prometheus.NewRegistry()
	rec := NewRecorder()
	ctx := context.Background()
	old := Note("orders/1", `{}`)
	old.OccurredAt = time.Now().Add(-time.Hour)
	if _, err := h.StageOne(ctx, old); err != nil {
		t.Fatal(err)
	}
	rec.Before = func(context.Context, fanout.Message) error { return ErrBrokerDown }
	w := StartWorker(t, h.Store, rec, outboxfeed.WorkerConfig{Registerer: reg})
	Eventually(t, 5*time.Second, "gauges refreshed", func() bool {
		return w.Metric("herald_outbox_pending") == 1 && w.Metric("herald_outbox_oldest_pending_age_seconds") >= 3500 &&
			w.Metric("herald_outbox_store_up") == 1 && w.Claims(outboxfeed.ClaimBatch) >= 1
	})
	if _, err := outboxfeed.NewWorker(h.Store, rec, outboxfeed.WorkerConfig{Registerer: reg}); err == nil {
		t.Fatal("a second worker registered the same metrics without error")
	}
	// The age is measured on the store's clock, which Stats reports.
	st, err := h.Store.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(st.Now); st.Now.IsZero() || d < -time.Minute || d > time.Minute {
		t.Fatalf("Stats.Now = %v, want the store's current time", st.Now)
	}
	w.Stop()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{"herald_outbox_pending", "herald_outbox_dead_letter", "herald_outbox_oldest_pending_age_seconds",
		"herald_outbox_attempts", "herald_outbox_dispatch_duration_seconds", "herald_outbox_outcomes_total", "herald_outbox_store_up", "herald_outbox_claims_total"} {
		if !names[n] {
			t.Errorf("metric %s not registered", n)
		}
	}
}

// testSlowBrokerStaysWithinLease: a broker so slow that one channel's batch
// would outlive its lease. The Worker stops starting publishes at half the
// lease and gives the rest back, so no delivered record is taken over,
// charged an attempt or published twice.
func testSlowBrokerWithinLease(t *testing.T, h *Harness) {
	const publish, lease = 250 * time.Millisecond, 5 * time.Second
	rec := NewRecorder()
	rec.Before = func(ctx context.Context, _ fanout.Message) error {
		select {
		case <-time.After(publish):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// 30 × 250 ms = 7.5 s of publishing against a 5 s lease. The half
	// lease left after publishing stops is the Worker's time to complete:
	// it must stay well above what a store answers in on a busy machine
	// (SQLite's one connection, shared by both Workers, answers in up to a
	// second there), or the second Worker takes the batch over. The
	// backlog gauges, not checked here, are not refreshed meanwhile: their
	// queries would only queue for that connection.
	const n = 30
	notes := make([]stage.Notification, n)
	for i := range notes {
		notes[i] = Note("orders/slow", fmt.Sprintf(`{"i":%d}`, i))
	}
	ids := h.Stage(t, true, notes...)
	// Two Workers: the second takes over whatever lease the first lets expire.
	cfg := outboxfeed.WorkerConfig{LeaseDuration: lease, BatchSize: 100, StatsInterval: time.Hour}
	w := StartWorker(t, h.Store, rec, cfg)
	w2 := StartWorker(t, h.Store, rec, cfg)
	Eventually(t, 3*time.Minute, "every record dispatched", func() bool {
		return w.Outcomes(outboxfeed.OutcomeSuccess)+w2.Outcomes(outboxfeed.OutcomeSuccess) >= n
	})
	// A batch starts publishing for half the lease, each publish taking at
	// least 250 ms: 11 records at most, so 3 batches at least.
	if batches, least := w.Claims(outboxfeed.ClaimBatch)+w2.Claims(outboxfeed.ClaimBatch), (n+10)/11; batches < float64(least) {
		t.Fatalf("%v batches published the %d records, want at least %d: each stops starting publishes at half its lease", batches, n, least)
	}
	got := rec.Channel(fanout.Key{Tenant: "acme", Channel: "orders/slow"})
	if len(got) != n {
		t.Fatalf("published %d times, want %d (no duplicates)", len(got), n)
	}
	for i, id := range ids {
		if got[i] != id {
			t.Fatalf("publication %d is %s, want %s: order broken", i, got[i], id)
		}
		d, ok := StateOf(t, h.Store, id).(outboxfeed.Dispatched)
		if !ok || d.Attempt != 0 {
			t.Fatalf("record %d: %#v, want dispatched with no failed attempt", i, StateOf(t, h.Store, id))
		}
	}
	if lost := w.Outcomes(outboxfeed.OutcomeLeaseLost) + w2.Outcomes(outboxfeed.OutcomeLeaseLost); lost != 0 {
		t.Fatalf("%v leases lost", lost)
	}
}

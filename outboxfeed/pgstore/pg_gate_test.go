package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/fanout/redisbroker"
	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/storetest"
	"github.com/jackc/pgx/v5"
)

// outageWindow is how long the outage tests measure a Worker's queries
// and writes (issue 22: "a 30 s outage of each").
const outageWindow = 30 * time.Second

// storeCutter returns a function that refuses (allowed false, ending every
// open connection) or accepts again connections to the database of url.
func storeCutter(t *testing.T, url string) func(allowed bool) {
	t.Helper()
	dbName := url[strings.LastIndex(url, "/")+1:]
	if i := strings.IndexByte(dbName, '?'); i >= 0 {
		dbName = dbName[:i]
	}
	admin, err := pgx.Connect(context.Background(), testenv.BaseDatabaseURL())
	testenv.Must(t, err, "connect admin")
	setAllowed := func(allowed bool) {
		t.Helper()
		_, err := admin.Exec(context.Background(), fmt.Sprintf(`ALTER DATABASE %s ALLOW_CONNECTIONS %t`, dbName, allowed))
		testenv.Must(t, err, "alter database")
		if !allowed {
			_, err = admin.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, dbName)
			testenv.Must(t, err, "terminate backends")
		}
	}
	t.Cleanup(func() {
		setAllowed(true)
		_ = admin.Close(context.Background())
	})
	return setAllowed
}

// countingStore is the PostgreSQL store, counting the calls a Worker
// makes (each is at least one query).
type countingStore struct {
	*Store
	pings, claims, completes, stats atomic.Int64
	pingFailed                      chan struct{}
}

func newCountingStore(s *Store) *countingStore {
	return &countingStore{Store: s, pingFailed: make(chan struct{}, 1)}
}

func (s *countingStore) Ping(ctx context.Context) error {
	return countPing(ctx, &s.pings, s.pingFailed, s.Store.Ping)
}

// countPing counts a ping and signals failed when it fails.
func countPing(ctx context.Context, n *atomic.Int64, failed chan struct{}, ping func(context.Context) error) error {
	n.Add(1)
	err := ping(ctx)
	if err != nil {
		signalTest(failed)
	}
	return err
}

func (s *countingStore) Claim(ctx context.Context, req outboxfeed.ClaimRequest) (*outboxfeed.Batch, error) {
	s.claims.Add(1)
	return s.Store.Claim(ctx, req)
}

func (s *countingStore) Complete(ctx context.Context, b *outboxfeed.Batch, out []outboxfeed.Outcome,
	next *outboxfeed.ClaimRequest) (bool, *outboxfeed.Batch, error) {
	s.completes.Add(1)
	return s.Store.Complete(ctx, b, out, next)
}

func (s *countingStore) Stats(ctx context.Context) (outboxfeed.Stats, error) {
	s.stats.Add(1)
	return s.Store.Stats(ctx)
}

// storeCalls is a snapshot of a countingStore's counts.
type storeCalls struct{ pings, claims, completes, stats int64 }

func (s *countingStore) calls() storeCalls {
	return storeCalls{s.pings.Load(), s.claims.Load(), s.completes.Load(), s.stats.Load()}
}

func (c storeCalls) minus(o storeCalls) storeCalls {
	return storeCalls{c.pings - o.pings, c.claims - o.claims, c.completes - o.completes, c.stats - o.stats}
}

// signalTest wakes ch without blocking.
func signalTest(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// waitSignal waits for ch or fails the test after timeout (a bound far
// above what a busy machine needs).
func waitSignal(t *testing.T, ch <-chan struct{}, timeout time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(timeout):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// During a store outage the Worker only pings the store, backing off up
// to ProbeMaxInterval: no claim, no completion, no stats query, while the
// oldest record's age keeps growing. It resumes by itself once the store
// answers.
func TestPostgresStoreOutageQueries(t *testing.T) {
	t.Parallel()
	s, url := newPGStore(t, Config{})
	cut := storeCutter(t, url)
	cs := newCountingStore(s)
	rec := storetest.NewRecorder()
	// A record of this channel waits in the retry queue (an hour's
	// backoff), so the oldest record's age is not 0.
	stuck := fanout.Key{Tenant: "acme", Channel: "stuck/1"}
	rec.Before = func(_ context.Context, msg fanout.Message) error {
		if msg.Key == stuck {
			return outboxfeed.Retryable(errors.New("not now"))
		}
		return nil
	}
	// The lead lane polls every 20ms and the gauges are refreshed every
	// 100ms: without the gate that is 1,500 claims and 300 stats queries
	// in the window.
	w := storetest.StartWorker(t, cs, rec, outboxfeed.WorkerConfig{StatsInterval: 100 * time.Millisecond,
		RetryBaseDelay: time.Hour, RetryMaxDelay: time.Hour})
	storetest.Eventually(t, 5*time.Second, "worker ready", w.Ready)
	_, err := stageOne(context.Background(), s, storetest.Note(stuck.Channel, `{"stuck":true}`))
	testenv.Must(t, err, "stage")
	// Its first attempt's completion written (the outcome is counted once
	// the store took it), so no completion is in flight at the cut: one
	// would be retried until its lease ends, every OutageMaxDelay (40ms
	// here), and the stats count the record as pending before it is
	// attempted too.
	storetest.Eventually(t, time.Minute, "the waiting record attempted and counted", func() bool {
		return w.Outcomes(outboxfeed.OutcomeRetry) == 1 &&
			w.Metric("herald_outbox_oldest_pending_age_seconds") > 0 && w.Metric("herald_outbox_pending") == 1
	})

	cut(false)
	// The prober starts once the Worker has met the outage.
	waitSignal(t, cs.pingFailed, 10*time.Second, "a failed ping")
	from := cs.calls()
	time.Sleep(outageWindow)
	during := cs.calls().minus(from)
	if w.Ready() || w.Metric("herald_outbox_store_up") != 0 {
		t.Fatalf("worker ready %v, store_up %v during the outage", w.Ready(), w.Metric("herald_outbox_store_up"))
	}
	if age := w.Metric("herald_outbox_oldest_pending_age_seconds"); age < outageWindow.Seconds() {
		t.Errorf("oldest pending age %vs after a %v outage: it must keep growing", age, outageWindow)
	}
	t.Logf("during a %v store outage: %+v", outageWindow, during)
	if during.claims != 0 || during.completes != 0 || during.stats != 0 {
		t.Errorf("the worker queried a store that was down: %d claims, %d completes, %d stats (want 0)",
			during.claims, during.completes, during.stats)
	}
	// 250ms doubling to 5s, each shortened by up to a quarter: at most 12
	// pings in 30s.
	if during.pings < 4 || during.pings > 15 {
		t.Errorf("%d pings in %v, want between 4 and 15 (backing off to 5s)", during.pings, outageWindow)
	}

	cut(true)
	storetest.Eventually(t, 10*time.Second, "worker ready again", w.Ready)
	statsBefore := cs.stats.Load()
	storetest.Eventually(t, 5*time.Second, "stats refreshed again", func() bool { return cs.stats.Load() > statsBefore })
	id, err := stageOne(context.Background(), s, storetest.Note("orders/1", `{"after":"outage"}`))
	testenv.Must(t, err, "stage")
	rec.WaitFor(t, 10*time.Second, "dispatch resumed", func() bool { _, ok := rec.ByID(id); return ok })
}

// pingTarget is a broker the Worker can ping.
type pingTarget interface {
	outboxfeed.Publisher
	outboxfeed.Pinger
}

// countingBroker counts a broker's pings and the publishes it accepted.
// Once markUp is called, the next accepted publish records how many pings
// came since.
type countingBroker struct {
	pingTarget
	pings      atomic.Int64
	pingFailed chan struct{}
	accepted   sync.Map // message id → struct{}
	published  chan struct{}
	// upAt is the ping count when the broker answered again (-1 before);
	// pingsToResume the pings from then to the next accepted publish (-1
	// before).
	upAt, pingsToResume atomic.Int64
}

func newCountingBroker(b pingTarget) *countingBroker {
	c := &countingBroker{pingTarget: b, pingFailed: make(chan struct{}, 1), published: make(chan struct{}, 1)}
	c.upAt.Store(-1)
	c.pingsToResume.Store(-1)
	return c
}

func (b *countingBroker) Ping(ctx context.Context) error {
	return countPing(ctx, &b.pings, b.pingFailed, b.pingTarget.Ping)
}

func (b *countingBroker) Publish(ctx context.Context, msg fanout.Message) (fanout.Publication, error) {
	pub, err := b.pingTarget.Publish(ctx, msg)
	if err == nil {
		if at := b.upAt.Load(); at >= 0 {
			b.pingsToResume.CompareAndSwap(-1, b.pings.Load()-at)
		}
		b.accepted.Store(msg.ID, struct{}{})
		signalTest(b.published)
	}
	return pub, err
}

// markUp notes that the broker is about to answer again.
func (b *countingBroker) markUp() { b.upAt.Store(b.pings.Load()) }

// waitAccepted waits until the broker accepted every one of ids.
func (b *countingBroker) waitAccepted(t *testing.T, timeout time.Duration, what string, ids ...string) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		missing := 0
		for _, id := range ids {
			if _, ok := b.accepted.Load(id); !ok {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		select {
		case <-b.published:
		case <-deadline:
			t.Fatalf("timed out waiting for %s: %d of %d not published", what, missing, len(ids))
		}
	}
}

// checkResumed checks that the first publish after markUp followed the
// first ping the broker answered: at most maxPings pings came between,
// those under way or made while the broker was coming up (they failed) and
// the one it answered. Dispatch thus resumed within one probe interval of
// the broker answering.
func (b *countingBroker) checkResumed(t *testing.T, maxPings int64) {
	t.Helper()
	if n := b.pingsToResume.Load(); n < 1 || n > maxPings {
		t.Errorf("the first publish after the broker came back followed %d pings, want 1 to %d", n, maxPings)
	}
}

// downRecorder is a Recorder whose broker can be taken down: then Publish
// and Ping fail.
type downRecorder struct {
	*storetest.Recorder
	down atomic.Bool
}

func newDownRecorder() *downRecorder {
	r := &downRecorder{Recorder: storetest.NewRecorder()}
	r.Before = func(context.Context, fanout.Message) error {
		if r.down.Load() {
			return storetest.ErrBrokerDown
		}
		return nil
	}
	return r
}

// Ping implements outboxfeed.Pinger.
func (r *downRecorder) Ping(context.Context) error {
	if r.down.Load() {
		return storetest.ErrBrokerDown
	}
	return nil
}

// With the broker down the Worker claims nothing and writes nothing, only
// pings the broker (at most every BrokerProbeMaxInterval), and publishes
// again at the first ping the broker answers, every record once.
func TestPostgresBrokerOutageGate(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	cs := newCountingStore(s)
	rec := newDownRecorder()
	pub := newCountingBroker(rec)
	w := storetest.StartWorker(t, cs, pub, outboxfeed.WorkerConfig{})
	storetest.Eventually(t, 5*time.Second, "worker ready", w.Ready)
	ctx := context.Background()
	stageNote := func(ch, payload string) string {
		t.Helper()
		id, err := stageOne(ctx, s, storetest.Note(ch, payload))
		testenv.Must(t, err, "stage")
		return id
	}
	first := stageNote("orders/0", `{"n":0}`)
	pub.waitAccepted(t, 5*time.Second, "delivery before the outage", first)

	rec.down.Store(true)
	// The Worker meets the outage with this record's publish.
	ids := []string{stageNote("orders/1", `{"n":1}`)}
	waitSignal(t, pub.pingFailed, 10*time.Second, "a failed broker ping")
	if up := w.Metric("herald_outbox_broker_up"); up != 0 {
		t.Fatalf("herald_outbox_broker_up = %v during the outage", up)
	}
	from, publishes, pingsFrom := cs.calls(), rec.CallCount(), pub.pings.Load()
	// Records staged during the outage wake the Worker; it still claims
	// none.
	for i := 2; i <= 6; i++ {
		ids = append(ids, stageNote(fmt.Sprintf("orders/%d", i), fmt.Sprintf(`{"n":%d}`, i)))
	}
	time.Sleep(outageWindow)
	during := cs.calls().minus(from)
	pings := pub.pings.Load() - pingsFrom
	t.Logf("during a %v broker outage: %+v, %d broker pings", outageWindow, during, pings)
	if during.claims != 0 || during.completes != 0 || rec.CallCount() != publishes {
		t.Errorf("the worker worked while the broker was down: %d claims, %d completes, %d publishes (want 0)",
			during.claims, during.completes, rec.CallCount()-publishes)
	}
	// 250ms doubling to 1s, each shortened by up to a quarter: at most 41
	// pings in 30s.
	if pings < 10 || pings > 45 {
		t.Errorf("%d broker pings in %v, want between 10 and 45 (backing off to 1s)", pings, outageWindow)
	}

	pub.markUp()
	rec.down.Store(false)
	pub.waitAccepted(t, 10*time.Second, "every record delivered after the outage", ids...)
	pub.checkResumed(t, 2) // one may have been under way
	if n := rec.Count(); n != len(ids)+1 {
		t.Errorf("%d publishes accepted, want %d (each record once)", n, len(ids)+1)
	}
	storetest.Eventually(t, 5*time.Second, "broker_up back to 1", func() bool { return w.Metric("herald_outbox_broker_up") == 1 })
	if r, d := w.Outcomes(outboxfeed.OutcomeRetry), w.Outcomes(outboxfeed.OutcomeDeadLetter); r != 0 || d != 0 {
		t.Fatalf("a broker outage burnt attempts: retry %v dead_letter %v", r, d)
	}
}

// The same with the Redis broker, killed and started again: the Worker
// gates on the broker's own Ping (the /readyz check), claims nothing
// while Redis is down, and publishes again at the first ping it answers.
func TestPostgresRedisBrokerOutageGate(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	cs := newCountingStore(s)
	srv := testenv.StartRedis(t)
	rb, err := redisbroker.New(redisbroker.Config{URL: srv.URL()})
	testenv.Must(t, err, "redis broker")
	t.Cleanup(rb.Stop)
	pub := newCountingBroker(rb)
	w := storetest.StartWorker(t, cs, pub, outboxfeed.WorkerConfig{})
	storetest.Eventually(t, 5*time.Second, "worker ready", w.Ready)
	ctx := context.Background()
	first, err := stageOne(ctx, s, storetest.Note("orders/0", `{"n":0}`))
	testenv.Must(t, err, "stage")
	pub.waitAccepted(t, 5*time.Second, "delivery before the outage", first)

	srv.Kill()
	held, err := stageOne(ctx, s, storetest.Note("orders/1", `{"n":1}`))
	testenv.Must(t, err, "stage")
	waitSignal(t, pub.pingFailed, 10*time.Second, "a failed broker ping")
	if up := w.Metric("herald_outbox_broker_up"); up != 0 {
		t.Fatalf("herald_outbox_broker_up = %v while Redis is down", up)
	}
	from, pingsFrom := cs.calls(), pub.pings.Load()
	more, err := stageOne(ctx, s, storetest.Note("orders/2", `{"n":2}`))
	testenv.Must(t, err, "stage")
	// Five more failed pings: about four seconds of outage.
	for pub.pings.Load() < pingsFrom+5 {
		waitSignal(t, pub.pingFailed, 10*time.Second, "the next failed broker ping")
	}
	// The batch that met the outage (held's) may write its held outcomes
	// after the first failed ping, on a busy machine: that one completion,
	// and nothing claimed.
	if during := cs.calls().minus(from); during.claims != 0 || during.completes > 1 {
		t.Errorf("the worker worked while Redis was down: %d claims, %d completes (want 0, and at most the one batch that met the outage)", during.claims, during.completes)
	}

	pub.markUp()
	srv.Start()
	pub.waitAccepted(t, 10*time.Second, "delivery after Redis came back", held, more)
	// One ping may have been under way, one made while Redis was starting.
	pub.checkResumed(t, 3)
	storetest.Eventually(t, 5*time.Second, "broker_up back to 1", func() bool { return w.Metric("herald_outbox_broker_up") == 1 })
}

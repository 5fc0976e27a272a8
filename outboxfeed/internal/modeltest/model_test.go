package modeltest

// Settings and the plan of the model-based test (doc.go says what it does
// and checks).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/stage"
)

const (
	envModelSeed     = "HERALD_MODEL_SEED"
	envModelOps      = "HERALD_MODEL_OPS"
	envModelRuns     = "HERALD_MODEL_RUNS"
	envModelDuration = "HERALD_MODEL_DURATION"
	envModelBatch    = "HERALD_MODEL_BATCH"
	envModelStall    = "HERALD_MODEL_STALL"

	// modelDefaultOps is the short run's length in producer transactions.
	modelDefaultOps = 80
	// modelDefaultStall is how long the run may go without a record
	// delivered (or a dead letter replayed) while some are still missing
	// before it is declared stuck. Generous: every wait of the run is far
	// shorter.
	modelDefaultStall = 45 * time.Second
	// modelWait bounds one wait for a condition of the store (a takeover,
	// a partition-count change completing).
	modelWait = 2 * time.Minute
	// modelMaxAttempts is the Workers' MaxAttempts.
	modelMaxAttempts = 3
)

// modelSettings are the run's settings from the environment.
type modelSettings struct {
	stall    time.Duration
	seed     uint64
	ops      int
	runs     int
	duration time.Duration
	batch    int
}

func modelSettingsFromEnv(t *testing.T) modelSettings {
	t.Helper()
	s := modelSettings{seed: rand.Uint64() % 1_000_000_000, ops: modelDefaultOps, runs: 1, stall: modelDefaultStall}
	atoi := func(name string, least int) int {
		v, err := strconv.Atoi(os.Getenv(name))
		if err != nil || v < least {
			t.Fatalf("%s=%q: want an integer ≥ %d", name, os.Getenv(name), least)
		}
		return v
	}
	if v := os.Getenv(envModelSeed); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want a non-negative integer", envModelSeed, v)
		}
		s.seed = seed
	}
	if os.Getenv(envModelOps) != "" {
		s.ops = atoi(envModelOps, 10)
	}
	if os.Getenv(envModelRuns) != "" {
		s.runs = atoi(envModelRuns, 1)
	}
	if os.Getenv(envModelBatch) != "" {
		// The Worker refuses a batch size above its bound with a clear
		// error (NewWorker).
		s.batch = atoi(envModelBatch, 1)
	}
	if v := os.Getenv(envModelStall); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive duration such as 45s", envModelStall, v)
		}
		s.stall = d
	}
	if v := os.Getenv(envModelDuration); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive duration such as 10m", envModelDuration, v)
		}
		s.duration = d
	}
	return s
}

// replayEnv is the environment, beside the seed, that makes the same plan.
func (s modelSettings) replayEnv() string {
	env := fmt.Sprintf("%s=%d", envModelOps, s.ops)
	if s.batch > 0 {
		env += fmt.Sprintf(" %s=%d", envModelBatch, s.batch)
	}
	return env
}

// modelCaps is what a store's producers and admin can do.
type modelCaps struct {
	store      string // "postgres" or "sqlite", for messages
	partitions bool   // SetPartitions can change the count (initially 4)
	prepared   bool   // producers can prepare transactions
	longOpen   bool   // producers can hold a transaction open while others commit
}

// modelBackend is one store's side of a run.
type modelBackend struct {
	// admin is the operator's Admin, on a store of its own.
	admin      outboxfeed.Admin
	adminStore outboxfeed.Store
	// openStore opens a store for one Worker (a process of its own).
	openStore func(t *testing.T) outboxfeed.Store
	// openConn opens a producer's connection.
	openConn func(t *testing.T) modelConn
	// raced says, for the records staged while the partition count
	// changed, how many went to a partition being replaced with an xid at
	// or above its barrier (they are at risk of never being claimed).
	raced func(ctx context.Context, ids []string) (string, error)
	// diagnose says, per id, where the store keeps the record.
	diagnose func(ctx context.Context, ids []string) (map[string]modelDiag, error)
}

// migratingStore is a store the model runs on.
type migratingStore interface {
	outboxfeed.Store
	Migrate(ctx context.Context) error
}

// newModelBackend is where every store's backend starts: open gives each
// Worker its store; the admin store is one more, migrated, with the
// producers' business table that createTable makes. The caller sets
// openConn, raced and diagnose.
func newModelBackend[S migratingStore](t *testing.T, open func(t *testing.T) S, createTable func(S) error) (*modelBackend, S) {
	admin := open(t)
	testenv.Must(t, admin.Migrate(context.Background()), "migrate")
	testenv.Must(t, createTable(admin), "create the business table")
	a, err := outboxfeed.AdminOf(admin)
	testenv.Must(t, err, "admin")
	return &modelBackend{
		admin: a, adminStore: admin,
		openStore: func(t *testing.T) outboxfeed.Store { return open(t) },
	}, admin
}

// modelDiag is where the store keeps a record the model misses.
type modelDiag struct {
	state     string // "" when the store has no such record
	part      int
	partState string // the partition's state
	queued    bool   // it has a row in the retry queue
	chQueued  int    // pending retry-queue rows of its channel in that partition
	attempt   int
	lastErr   string
}

// modelConn is a producer's connection: one transaction at a time.
type modelConn interface {
	begin(ctx context.Context) error
	// business writes a row of the application's own (PostgreSQL assigns
	// the transaction's xid at its first write).
	business(ctx context.Context, producer int) error
	stage(ctx context.Context, n stage.Notification) (string, error)
	exec(ctx context.Context, sql string) error
	commit(ctx context.Context) error
	rollback(ctx context.Context) error
	// prepare runs PREPARE TRANSACTION gid; the connection is then free.
	prepare(ctx context.Context, gid string) error
	// finishPrepared runs COMMIT PREPARED or ROLLBACK PREPARED.
	finishPrepared(ctx context.Context, gid string, commit bool) error
	close()
}

// modelRaceConn is a producer's connection that can tell, inside its
// transaction, whether its record went to a partition being replaced
// with an xid at or above the partition's retire barrier.
type modelRaceConn interface {
	raceRisk(ctx context.Context, id string) (part int, risk bool, err error)
}

// runModels runs the model on one store: one run, HERALD_MODEL_RUNS runs
// or runs for HERALD_MODEL_DURATION, each a subtest named after its seed.
func runModels(t *testing.T, caps modelCaps, newBackend func(t *testing.T, plan *modelPlan) *modelBackend) {
	s := modelSettingsFromEnv(t)
	start := time.Now()
	var failed []uint64
	for i := 0; ; i++ {
		if s.duration > 0 && i > 0 && time.Since(start) >= s.duration || s.duration == 0 && i >= s.runs {
			break
		}
		seed := s.seed + uint64(i)
		plan := newModelPlan(seed, s, caps)
		if !t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			runModel(t, newBackend(t, plan), plan)
		}) {
			failed = append(failed, seed)
		}
	}
	if len(failed) > 0 {
		t.Logf("model on %s: failing seeds %v (ops %d); replay one with %s=<seed> %s go test -race -count=1 -run 'TestModel%s$' ./outboxfeed/internal/modeltest/",
			caps.store, failed, s.ops, envModelSeed, s.replayEnv(), modelTestSuffix(caps.store))
	}
}

// ----------------------------------------------------------------------
// The plan: everything a seed decides.

type modelPlan struct {
	seed        uint64
	ops         int
	caps        modelCaps
	keys        []fanout.Key
	weights     []int
	producers   int
	txs         []*mTx
	workers     []mWorkerPlan // started at the beginning
	events      []mEvent
	lease       time.Duration
	notify      bool // PostgreSQL: install the wake-up trigger
	forcedBatch int
	stall       time.Duration
	settings    modelSettings
	rng         *rand.Rand // for the plan's later choices (racers' channels)
}

// mWorkerPlan is one Worker's settings.
type mWorkerPlan struct {
	batch, lanes, concurrency int
	outageMax                 time.Duration
	durable                   bool
}

func (w mWorkerPlan) String() string {
	return fmt.Sprintf("batch %d, lanes %d, concurrency %d, outage backoff ≤%v, durable %v",
		w.batch, w.lanes, w.concurrency, w.outageMax, w.durable)
}

// mFate is what the broker does with a record.
type mFate uint8

const (
	fateOK        mFate = iota
	fateRetry           // Retryable for its first fails attempts
	fatePermanent       // Permanent: a dead letter, replayed by the operator
	fateExhaust         // Retryable until its attempts run out: a dead letter, replayed
	fateLost            // its first publish is accepted, the answer lost (an outage error)
)

var fateNames = [...]string{"ok", "retry", "permanent", "exhaust", "lost-answer"}

func (f mFate) String() string { return fateNames[f] }

// deadLetters reports whether the fate makes the record a dead letter.
func (f mFate) deadLetters() bool { return f == fatePermanent || f == fateExhaust }

// mRec is one record a producer stages.
type mRec struct {
	tx    *mTx
	idx   int // staging order in its transaction
	key   fanout.Key
	fate  mFate
	fails int // fateRetry
	// At run time.
	id        string
	stageTick int64 // the model's clock just before it was staged
	undone    bool  // its savepoint was rolled back
}

// committed reports whether the record is in the store for good.
func (r *mRec) committed() bool { return r.id != "" && !r.undone && r.tx.committed }

type mGroup struct {
	savepoint bool
	rollback  bool // rolled back to the savepoint
	recs      []*mRec
	holdAfter int // then wait until this many other transactions finished
}

type mEnd uint8

const (
	endCommit mEnd = iota
	endRollback
	endPrepareCommit
	endPrepareRollback
)

type mTx struct {
	n         int
	producer  int
	business  bool
	holdFirst int // after the business row, wait until this many other transactions finished
	groups    []mGroup
	end       mEnd
	prepHold  int // prepared: wait until this many other transactions finished, then finish
	racer     bool
	// At run time.
	firstWrite int64 // the model's clock just before its first write
	commitTick int64 // the model's clock just after its commit returned
	committed  bool
}

type mEventKind uint8

const (
	evOutage mEventKind = iota
	evOutageEnd
	evPause
	evStopMidBatch
	evCrash
	evStartWorker
	evSetPartitions
	evReplay
)

var eventNames = [...]string{"broker outage starts", "broker outage ends", "pause a Worker past its lease", "stop a Worker mid-batch",
	"a Worker's process dies", "start a Worker", "change the partition count", "replay dead letters"}

// mEvent is one event of the run.
type mEvent struct {
	at     int // once this many producer transactions finished
	kind   mEventKind
	pick   int         // the Worker, among those alive
	goOn   bool        // evPause: the resumed publish reaches the broker (else it fails)
	cancel bool        // evStopMidBatch: cancel the Start context (else Stop)
	worker mWorkerPlan // evStartWorker
	parts  int         // evSetPartitions: the new count
	racers int         // evSetPartitions: transactions that stage while the change commits
	// evSetPartitions: the racers commit once this many producer
	// transactions finished after the change
	racerHold int
	gate      bool // evSetPartitions: producers' commits wait until the change returned
}

func (e mEvent) String() string {
	s := fmt.Sprintf("@%d %s", e.at, eventNames[e.kind])
	switch e.kind {
	case evPause:
		s += fmt.Sprintf(" (worker #%d, resumed publish reaches the broker: %v)", e.pick, e.goOn)
	case evStopMidBatch:
		s += fmt.Sprintf(" (worker #%d, by cancelling its context: %v)", e.pick, e.cancel)
	case evCrash:
		s += fmt.Sprintf(" (worker #%d)", e.pick)
	case evStartWorker:
		s += " (" + e.worker.String() + ")"
	case evSetPartitions:
		s += fmt.Sprintf(" to %d (%d racing transactions held for %d more, commits held: %v)", e.parts, e.racers, e.racerHold, e.gate)
	}
	return s
}

func newModelPlan(seed uint64, s modelSettings, caps modelCaps) *modelPlan {
	r := rand.New(rand.NewPCG(seed, 0x68657261_6c64))
	p := &modelPlan{seed: seed, ops: s.ops, caps: caps, forcedBatch: s.batch, stall: s.stall, settings: s}
	// Channels: two hot ones, the same names in two tenants.
	for i := range 8 {
		p.keys = append(p.keys, fanout.Key{Tenant: "acme", Channel: fmt.Sprintf("orders/%d", i)})
		w := 1
		if i < 2 {
			w = 6
		}
		p.weights = append(p.weights, w)
	}
	for i := range 2 {
		p.keys = append(p.keys, fanout.Key{Tenant: "globex", Channel: fmt.Sprintf("orders/%d", i)})
		p.weights = append(p.weights, 2)
	}
	p.producers = 3 + r.IntN(4)
	if !caps.longOpen {
		p.producers = 2 + r.IntN(3)
	}
	p.lease = []time.Duration{800 * time.Millisecond, time.Second, 1500 * time.Millisecond}[r.IntN(3)]
	p.notify = !caps.prepared || r.IntN(3) > 0

	for n := range s.ops {
		p.txs = append(p.txs, p.newTx(r, n))
	}
	for range 2 + r.IntN(2) {
		p.workers = append(p.workers, p.newWorker(r))
	}

	// Events, scaled to the run's length.
	T := s.ops
	scale := max(1, T/modelDefaultOps)
	at := func(lo, hi float64) int { return int(lo*float64(T)) + r.IntN(max(1, int((hi-lo)*float64(T)))) }
	for range (2 + r.IntN(2)) * scale {
		a := at(0.05, 0.85)
		p.events = append(p.events, mEvent{at: a, kind: evOutage}, mEvent{at: a + max(3, T/12+r.IntN(max(1, T/12))), kind: evOutageEnd})
	}
	for range (1 + r.IntN(2)) * scale {
		p.events = append(p.events, mEvent{at: at(0.1, 0.9), kind: evPause, pick: r.IntN(8), goOn: r.IntN(2) == 0})
	}
	for range scale {
		a := at(0.1, 0.9)
		p.events = append(p.events, mEvent{at: a, kind: evStopMidBatch, pick: r.IntN(8), cancel: r.IntN(2) == 0},
			mEvent{at: a, kind: evStartWorker, worker: p.newWorker(r)})
		a = at(0.1, 0.9)
		p.events = append(p.events, mEvent{at: a, kind: evCrash, pick: r.IntN(8)},
			mEvent{at: a, kind: evStartWorker, worker: p.newWorker(r)})
	}
	if caps.partitions {
		counts := []int{1, 2, 3, 5, 8}
		changes := max(1, T/400)
		for i := range changes {
			lo := 0.3 + 0.5*float64(i)/float64(changes)
			e := mEvent{at: at(lo, lo+0.3/float64(changes)), kind: evSetPartitions, parts: counts[r.IntN(len(counts))], gate: r.IntN(2) == 0}
			if r.IntN(3) > 0 {
				e.racers, e.racerHold = 8+r.IntN(24), r.IntN(12)
			}
			if r.IntN(2) == 0 {
				// During a broker outage: the Workers back off, their claims
				// are few.
				p.events = append(p.events, mEvent{at: e.at, kind: evOutage}, mEvent{at: e.at + max(2, T/20), kind: evOutageEnd})
			}
			p.events = append(p.events, e)
			// A replay after each change: dead letters of retired
			// partitions go back to pending.
			p.events = append(p.events, mEvent{at: min(T, e.at+T/10+r.IntN(max(1, T/10))), kind: evReplay})
		}
	}
	p.events = append(p.events, mEvent{at: at(0.4, 0.6), kind: evReplay})
	sort.SliceStable(p.events, func(i, j int) bool { return p.events[i].at < p.events[j].at })
	p.rng = rand.New(rand.NewPCG(seed, 0x72616365))
	return p
}

func (p *modelPlan) pickKey(r *rand.Rand) fanout.Key {
	total := 0
	for _, w := range p.weights {
		total += w
	}
	n := r.IntN(total)
	for i, w := range p.weights {
		if n < w {
			return p.keys[i]
		}
		n -= w
	}
	return p.keys[0]
}

func (p *modelPlan) newWorker(r *rand.Rand) mWorkerPlan {
	batches := []int{1, 2, 3, 5, 8, 20, 100, 1000}
	w := mWorkerPlan{
		batch: batches[r.IntN(len(batches))], lanes: 1 + r.IntN(4), concurrency: 1 + r.IntN(8),
		outageMax: []time.Duration{20 * time.Millisecond, 100 * time.Millisecond, 300 * time.Millisecond}[r.IntN(3)],
		durable:   r.IntN(4) == 0,
	}
	if p.forcedBatch > 0 {
		w.batch = p.forcedBatch
	}
	return w
}

func (p *modelPlan) newRec(r *rand.Rand, tx *mTx, key fanout.Key) *mRec {
	rec := &mRec{tx: tx, key: key}
	switch n := r.IntN(1000); {
	case n < 40:
		rec.fate, rec.fails = fateRetry, 1+r.IntN(modelMaxAttempts-2)
	case n < 65:
		rec.fate = fatePermanent
	case n < 75:
		rec.fate = fateExhaust
	case n < 105:
		rec.fate = fateLost
	}
	return rec
}

func (p *modelPlan) newTx(r *rand.Rand, n int) *mTx {
	tx := &mTx{n: n, producer: n % p.producers}
	home := p.pickKey(r)
	pick := func() fanout.Key {
		if r.IntN(10) < 7 {
			return home
		}
		return p.pickKey(r)
	}
	idx := 0
	add := func(g *mGroup, key fanout.Key) {
		rec := p.newRec(r, tx, key)
		rec.idx = idx
		idx++
		g.recs = append(g.recs, rec)
	}
	if r.IntN(20) == 0 {
		// A burst on one channel: more than a batch of most Workers.
		g := mGroup{}
		for range 12 + r.IntN(30) {
			add(&g, home)
		}
		tx.groups = append(tx.groups, g)
		return tx
	}
	tx.business = r.IntN(100) < 35
	if tx.business && p.caps.longOpen && r.IntN(10) < 6 {
		tx.holdFirst = 1 + r.IntN(4)
	}
	groups := 1 + r.IntN(3)
	for gi := range groups {
		g := mGroup{savepoint: r.IntN(4) == 0}
		g.rollback = g.savepoint && r.IntN(5) < 2
		for range 1 + r.IntN(3) {
			add(&g, pick())
		}
		if p.caps.longOpen && gi < groups-1 && r.IntN(4) == 0 {
			g.holdAfter = 1 + r.IntN(3)
		}
		tx.groups = append(tx.groups, g)
	}
	switch n := r.IntN(100); {
	case n < 7:
		tx.end = endRollback
	case p.caps.prepared && n < 11:
		tx.end, tx.prepHold = endPrepareCommit, r.IntN(4)
	case p.caps.prepared && n < 12:
		tx.end, tx.prepHold = endPrepareRollback, r.IntN(3)
	}
	return tx
}

// summary describes the plan in a few lines.
func (p *modelPlan) summary() string {
	var b strings.Builder
	recs, ends := 0, map[mEnd]int{}
	fates := map[mFate]int{}
	for _, tx := range p.txs {
		ends[tx.end]++
		for _, g := range tx.groups {
			for _, r := range g.recs {
				recs++
				fates[r.fate]++
			}
		}
	}
	fmt.Fprintf(&b, "%d producers, %d transactions (%d rolled back, %d prepared), %d records to stage; fates %v; lease %v; wake-up trigger %v\n",
		p.producers, len(p.txs), ends[endRollback], ends[endPrepareCommit]+ends[endPrepareRollback], recs, fates, p.lease, p.notify)
	for i, w := range p.workers {
		fmt.Fprintf(&b, "  worker m%d: %s\n", i, w)
	}
	for _, e := range p.events {
		fmt.Fprintf(&b, "  %s\n", e)
	}
	return b.String()
}

package main

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/pgstore"
)

// stageStore is the realtime Worker's store in the latency phase: it
// notes when each record came out of a claim (a Claim, or a Complete's
// next claim) and how long the store's calls took, so that commit →
// accept splits into commit → claimed and claimed → accepted.
type stageStore struct {
	*pgstore.Store
	name string    // the handler, in the timeline
	tl   *timeline // shared by the handlers' stores

	mu        sync.Mutex
	claimedAt map[string]time.Time
	sentAt    map[string]time.Time // when the call that returned the record began
	calls     []call               // every call, with what of the webhook handler's overlapped it
	arms      int                  // requests that armed the wake-up trigger (or renewed it)
	disarms   int                  // requests that disarmed it
	claims    []time.Duration      // Claim calls
	completes []time.Duration      // Complete calls (with their claim)
}

func newStageStore(s *pgstore.Store, name string, tl *timeline) *stageStore {
	return &stageStore{Store: s, name: name, tl: tl, claimedAt: map[string]time.Time{}, sentAt: map[string]time.Time{}}
}

// begin starts one of the store's calls: the webhook handler's count in
// hookActivity; realtime's note what of the webhook handler's ran when
// it began, for end.
func (s *stageStore) begin() (overlapMark, func()) {
	if s.name == "webhook" {
		hookActivity.stmtStarts.Add(1)
		hookActivity.stmts.Add(1)
		return overlapMark{}, func() { hookActivity.stmts.Add(-1) }
	}
	return hookActivity.mark(), func() {}
}

// endCall notes a call of realtime's that began at t0 with m.
func (s *stageStore) endCall(t0 time.Time, m overlapMark) {
	if s.name == "webhook" {
		return
	}
	d := time.Since(t0)
	st, dl := hookActivity.since(m)
	s.mu.Lock()
	s.calls = append(s.calls, call{d: d, withStmt: st, withSend: dl, startStmt: m.stmts > 0, startSend: m.delivers > 0})
	s.mu.Unlock()
}

// Stats implements outboxfeed.Store, noting the call in the timeline.
func (s *stageStore) Stats(ctx context.Context) (outboxfeed.Stats, error) {
	t0 := time.Now()
	st, err := s.Store.Stats(ctx)
	s.tl.add(t0, s.name+" stats")
	return st, err
}

// Claim implements outboxfeed.Store, timing the call.
func (s *stageStore) Claim(ctx context.Context, req outboxfeed.ClaimRequest) (*outboxfeed.Batch, error) {
	t0 := time.Now()
	m, done := s.begin()
	b, err := s.Store.Claim(ctx, req)
	done()
	s.endCall(t0, m)
	s.noteWake(&req)
	s.note(b, &s.claims, t0)
	s.tl.addBatch(t0, s.name+" claim", b)
	return b, err
}

// Complete implements outboxfeed.Store, timing the call.
func (s *stageStore) Complete(ctx context.Context, b *outboxfeed.Batch, out []outboxfeed.Outcome, next *outboxfeed.ClaimRequest) (bool, *outboxfeed.Batch, error) {
	t0 := time.Now()
	m, done := s.begin()
	held, nb, err := s.Store.Complete(ctx, b, out, next)
	done()
	s.endCall(t0, m)
	s.noteWake(next)
	s.note(nb, &s.completes, t0)
	s.tl.addBatch(t0, s.name+" complete", nb)
	return held, nb, err
}

// CompleteMany implements outboxfeed.Store, timing the call (with the
// Complete calls: a completion of several batches and its claims).
func (s *stageStore) CompleteMany(ctx context.Context, cs []outboxfeed.Completion, next *outboxfeed.ClaimRequest) ([]bool, []*outboxfeed.Batch, error) {
	t0 := time.Now()
	m, done := s.begin()
	held, nbs, err := s.Store.CompleteMany(ctx, cs, next)
	done()
	s.endCall(t0, m)
	s.noteWake(next)
	calls := &s.completes
	if len(cs) == 0 {
		calls = &s.claims
	}
	s.note(nil, calls, t0)
	for _, nb := range nbs {
		s.noteRecords(nb, t0)
		s.tl.addBatch(t0, s.name+" complete", nb)
	}
	return held, nbs, err
}

// noteRecords notes b's records as claimed now.
func (s *stageStore) noteRecords(b *outboxfeed.Batch, t0 time.Time) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range b.Records {
		if _, dup := s.claimedAt[b.Records[i].ID]; !dup {
			s.claimedAt[b.Records[i].ID] = now
			s.sentAt[b.Records[i].ID] = t0
		}
	}
}

// note records a call that began at t0 and the records of b it returned.
func (s *stageStore) note(b *outboxfeed.Batch, calls *[]time.Duration, t0 time.Time) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	*calls = append(*calls, now.Sub(t0))
	if b == nil {
		return
	}
	for i := range b.Records {
		if _, dup := s.claimedAt[b.Records[i].ID]; !dup {
			s.claimedAt[b.Records[i].ID] = now
			s.sentAt[b.Records[i].ID] = t0
		}
	}
}

// noteWake counts what req does to the wake-up trigger.
func (s *stageStore) noteWake(req *outboxfeed.ClaimRequest) {
	if req == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case req.Disarm:
		s.disarms++
	case req.Arm > 0:
		s.arms++
	}
}

// reset forgets what was noted so far (the phase's setup).
func (s *stageStore) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.claimedAt)
	clear(s.sentAt)
	s.claims, s.completes, s.calls = nil, nil, nil
	s.arms, s.disarms = 0, 0
}

// stageTimes is where a latency run's commit → accept went.
type stageTimes struct {
	ToClaim, ToAccept  benchkit.Quantiles // commit → claimed, claimed → accepted
	Claim, Complete    benchkit.Quantiles // the store's calls
	Arms, Disarms      int                // the requests that armed (or renewed) and disarmed the wake-up trigger
	PoolWaits          int64              // pool acquires that had to wait for a connection
	PoolWait           time.Duration      // their total wait
	SchedP50, SchedP99 time.Duration      // goroutine scheduling latency (runnable → running), the whole process
	SchedOver1ms       float64            // share of scheduling waits above 1 ms
	// Wait, Stmt: commit → the start of the call that returned the record
	// (0 when it began before the commit), and the rest of that call
	// after the commit.
	Wait, Stmt benchkit.Quantiles
	Overlap    string        // realtime's calls by what of the webhook handler's overlapped them
	Pressure   time.Duration // CPU pressure (some) over the run
	pressure0  time.Duration
	GCs        uint64 // garbage collections during the run
	gcs0       uint64
	poolStat0  poolCounters
	sched0     *metrics.Float64Histogram
}

// poolCounters are the pool's acquire counters at one moment.
type poolCounters struct {
	empty int64
	wait  time.Duration
}

func readPool(p *pgxpool.Pool) poolCounters {
	st := p.Stat()
	return poolCounters{empty: st.EmptyAcquireCount(), wait: st.EmptyAcquireWaitTime()}
}

const schedMetric = "/sched/latencies:seconds"

func readSched() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: schedMetric}}
	metrics.Read(s)
	return s[0].Value.Float64Histogram()
}

// begin reads the counters a run's figures are differences of.
func (t *stageTimes) begin(p *pgxpool.Pool) {
	t.poolStat0, t.sched0 = readPool(p), readSched()
	t.pressure0 = cpuPressure()
	t.gcs0 = gcCycles()
}

// end reads the counters again and summarizes the run's stages.
func (t *stageTimes) end(p *pgxpool.Pool, s *stageStore, marks []commitMark, acceptTime func(string) (time.Time, bool)) {
	pc := readPool(p)
	t.PoolWaits, t.PoolWait = pc.empty-t.poolStat0.empty, pc.wait-t.poolStat0.wait
	t.SchedP50, t.SchedP99, t.SchedOver1ms = schedQuantiles(t.sched0, readSched())
	s.mu.Lock()
	defer s.mu.Unlock()
	t.Pressure = cpuPressure() - t.pressure0
	t.GCs = gcCycles() - t.gcs0
	var toClaim, toAccept, waits, stmts []time.Duration
	for _, m := range marks {
		c, ok := s.claimedAt[m.id]
		if !ok {
			continue
		}
		toClaim = append(toClaim, max(0, c.Sub(m.committedAt)))
		sent := s.sentAt[m.id]
		waits = append(waits, max(0, sent.Sub(m.committedAt)))
		stmts = append(stmts, max(0, c.Sub(maxTime(sent, m.committedAt))))
		if a, ok := acceptTime(m.id); ok {
			toAccept = append(toAccept, max(0, a.Sub(c)))
		}
	}
	t.ToClaim, t.ToAccept = benchkit.Summarize(toClaim), benchkit.Summarize(toAccept)
	t.Wait, t.Stmt = benchkit.Summarize(waits), benchkit.Summarize(stmts)
	t.Overlap = overlapSplit(s.calls, false) + "\n    realtime's calls by what was under way as they began: " + overlapSplit(s.calls, true)
	t.Arms, t.Disarms = s.arms, s.disarms
	t.Claim, t.Complete = benchkit.Summarize(append([]time.Duration(nil), s.claims...)), benchkit.Summarize(append([]time.Duration(nil), s.completes...))
}

// schedQuantiles reads the p50 and p99 of the scheduling latencies
// counted between a and b, and the share of them above 1 ms.
func schedQuantiles(a, b *metrics.Float64Histogram) (p50, p99 time.Duration, over1ms float64) {
	counts := make([]uint64, len(b.Counts))
	var total, over uint64
	for i := range b.Counts {
		counts[i] = b.Counts[i] - a.Counts[i]
		total += counts[i]
		if b.Buckets[i] >= 0.001 {
			over += counts[i]
		}
	}
	if total == 0 {
		return 0, 0, 0
	}
	at := func(q float64) time.Duration {
		want := uint64(math.Ceil(q * float64(total)))
		var n uint64
		for i, c := range counts {
			n += c
			if n >= want {
				up := b.Buckets[i+1]
				if math.IsInf(up, 1) {
					up = b.Buckets[i]
				}
				return time.Duration(up * float64(time.Second))
			}
		}
		return 0
	}
	return at(0.5), at(0.99), float64(over) / float64(total)
}

// String is the progress line's account of the stages.
func (t *stageTimes) String() string {
	return fmt.Sprintf("commit → claimed p50 %s p99 %s; claimed → accepted p50 %s p99 %s; Claim p50 %s p99 %s (%d); Complete p50 %s p99 %s (%d); arms %d, disarms %d; pool waits %d (%s); scheduling latency p50 %s p99 %s, %.1f %% over 1 ms",
		benchkit.MS(t.ToClaim.P50), benchkit.MS(t.ToClaim.P99), benchkit.MS(t.ToAccept.P50), benchkit.MS(t.ToAccept.P99),
		benchkit.MS(t.Claim.P50), benchkit.MS(t.Claim.P99), t.Claim.N, benchkit.MS(t.Complete.P50), benchkit.MS(t.Complete.P99), t.Complete.N,
		t.Arms, t.Disarms, t.PoolWaits, benchkit.MS(t.PoolWait), benchkit.MS(t.SchedP50), benchkit.MS(t.SchedP99), 100*t.SchedOver1ms) +
		fmt.Sprintf("\n    commit → the returning call's start p50 %s p99 %s; that call after the commit p50 %s p99 %s; CPU pressure %s; %d GC cycles\n    realtime's calls: %s",
			benchkit.MS(t.Wait.P50), benchkit.MS(t.Wait.P99), benchkit.MS(t.Stmt.P50), benchkit.MS(t.Stmt.P99), t.Pressure.Round(time.Millisecond), t.GCs, t.Overlap)
}

// timeline notes the store calls of both handlers (-sample-waits), to set
// realtime's slowest records beside what ran when they were committed.
type timeline struct {
	mu     sync.Mutex
	on     bool
	events []event
}

// event is one store call.
type event struct {
	from, to time.Time
	what     string
	records  int
}

func (t *timeline) add(from time.Time, what string) { t.addN(from, what, 0) }

func (t *timeline) addBatch(from time.Time, what string, b *outboxfeed.Batch) {
	n := 0
	if b != nil {
		n = len(b.Records)
	}
	t.addN(from, what, n)
}

func (t *timeline) addN(from time.Time, what string, n int) {
	if t == nil {
		return
	}
	to := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.on {
		t.events = append(t.events, event{from: from, to: to, what: what, records: n})
	}
}

func (t *timeline) start() {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.on, t.events = true, nil
	t.mu.Unlock()
}

// slowest describes when realtime's slowest 1 % of records were committed
// (in bins of 100 ms from the first commit), and, for the bins that hold
// most of them, the store calls under way then: their count, time in
// calls, and the slowest, per kind.
func (t *timeline) slowest(marks []commitMark, accepted func(string) (time.Time, bool)) string {
	if t == nil || len(marks) == 0 {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	type lat struct {
		at time.Time
		d  time.Duration
	}
	var all []lat
	first := marks[0].committedAt
	for _, m := range marks {
		first = minTime(first, m.committedAt)
		if a, ok := accepted(m.id); ok {
			all = append(all, lat{m.committedAt, a.Sub(m.committedAt)})
		}
	}
	slices.SortFunc(all, func(a, b lat) int { return cmp.Compare(b.d, a.d) })
	worst := all[:max(1, len(all)/100)]
	const bin = 100 * time.Millisecond
	bins := map[int]int{}
	for _, l := range worst {
		bins[int(l.at.Sub(first)/bin)]++
	}
	type kv struct{ k, n int }
	var order []kv
	for k, n := range bins {
		order = append(order, kv{k, n})
	}
	slices.SortFunc(order, func(a, b kv) int { return cmp.Compare(b.n, a.n) })
	var b strings.Builder
	fmt.Fprintf(&b, "slowest %d records (≥ %s) by commit time, 100 ms bins:", len(worst), benchkit.MS(worst[len(worst)-1].d))
	for _, o := range order[:min(len(order), 6)] {
		from := first.Add(time.Duration(o.k) * bin)
		to := from.Add(bin)
		fmt.Fprintf(&b, "\n    %5.1f s: %d records;", from.Sub(first).Seconds(), o.n)
		type agg struct {
			n       int
			busy    time.Duration
			longest time.Duration
			records int
		}
		kinds := map[string]*agg{}
		for _, e := range t.events {
			if e.to.Before(from) || e.from.After(to) {
				continue
			}
			a := kinds[e.what]
			if a == nil {
				a = &agg{}
				kinds[e.what] = a
			}
			a.n++
			a.records += e.records
			a.busy += minTime(e.to, to).Sub(maxTime(e.from, from))
			a.longest = max(a.longest, e.to.Sub(e.from))
		}
		names := make([]string, 0, len(kinds))
		for k := range kinds {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			a := kinds[k]
			fmt.Fprintf(&b, " %s %d (%d rec, busy %s, longest %s);", k, a.n, a.records, benchkit.MS(a.busy), benchkit.MS(a.longest))
		}
	}
	return b.String()
}

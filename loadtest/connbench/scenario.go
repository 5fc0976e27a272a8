package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"sync"
	"time"

	"github.com/heraldgw/herald/loadtest/internal/hostinfo"
)

// run runs cfg's scenario against tgt and returns what it measured.
func run(ctx context.Context, cfg config, tgt *target, progress io.Writer) (*result, error) {
	r := newRunner(cfg, tgt)
	defer r.stop()
	res := &result{cfg: cfg, server: tgt.desc, loadStart: hostinfo.LoadAvg(), channels: cfg.channels()}

	before := r.settled(ctx)
	res.before = before
	fmt.Fprintf(progress, "connbench: opening %d %s connections over %d channel(s) (run %s)\n", cfg.Conns, cfg.Transport, cfg.channels(), r.runID)
	cctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	open := r.openWS
	switch {
	case cfg.centrifugo():
		open = r.openCF
	case cfg.Transport == "sse":
		open = r.openSSE
	}
	err := forEach(cctx, cfg.Conns, cfg.DialConcurrency, func(ctx context.Context, i int) error {
		return open(ctx, r.subs[i])
	})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("connbench: opening connections: %w", err)
	}
	connected := r.snapshot(ctx)
	res.connected = connected
	res.connect = connected.at.Sub(before.at)
	fmt.Fprintf(progress, "connbench: %d connections open and subscribed in %.2fs\n", cfg.Conns, res.connect.Seconds())

	if cfg.publishes() {
		if err := r.publish(ctx, res, progress); err != nil {
			return nil, err
		}
	} else {
		fmt.Fprintf(progress, "connbench: holding them for %v\n", cfg.Duration)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connbench: %w", ctx.Err())
		case <-time.After(cfg.Duration):
		}
		res.after = r.snapshot(ctx)
	}
	if !tgt.alive() {
		return nil, fmt.Errorf("connbench: the server exited during the run\n%s", tgt.logTail())
	}
	r.stop()
	if cfg.centrifugo() {
		res.logErrors = tgt.errorLines()
	}
	res.loadEnd = hostinfo.LoadAvg()
	res.retries = r.retries
	r.account(res)
	return res, nil
}

// source is a publisher: the herald.v1 publish op on one WebSocket
// (publisher) or transactions staging outbox records (outboxPublisher).
type source interface {
	// run publishes rate publications/s for d, round-robin over the
	// channels, then waits up to wait for those still in flight.
	run(ctx context.Context, rate int, d, wait time.Duration) error
	// accepted lists what the subscribers of channel c must receive, as
	// they track it (subscriber.bit): offsets the server returned, or the
	// sequence numbers of committed outbox records.
	accepted(c int) []uint64
	// stats is what was sent, what was refused (by reason) and how far
	// the pacer fell behind its schedule.
	stats() (sent int, errs map[string]int, maxLag time.Duration)
	close()
}

// sourceTally is what a source counts, shared by its goroutines: it
// implements source's accepted and stats.
type sourceTally struct {
	mu      sync.Mutex
	accepts [][]uint64     // per channel: what its subscribers must receive (source.accepted)
	errs    map[string]int // refused publications or failed transactions, by reason
	sent    int
	maxLag  time.Duration // how far the pacer fell behind its schedule
}

func newSourceTally(channels int) sourceTally {
	return sourceTally{accepts: make([][]uint64, channels), errs: make(map[string]int)}
}

// accept records v as accepted on channel c; the caller holds mu.
func (t *sourceTally) accept(c int, v uint64) { t.accepts[c] = append(t.accepts[c], v) }

func (t *sourceTally) accepted(c int) []uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.accepts[c]
}

func (t *sourceTally) stats() (sent int, errs map[string]int, maxLag time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sent, maps.Clone(t.errs), t.maxLag
}

func (r *runner) openSource(ctx context.Context) (source, error) {
	switch {
	case r.cfg.PublishVia == "outbox":
		return r.openOutboxPublisher(ctx)
	case r.cfg.centrifugo():
		return r.openCFPublisher(), nil
	}
	return r.openPublisher(ctx)
}

// publish runs the publisher for the scenario's duration, then waits for
// the deliveries still on their way.
func (r *runner) publish(ctx context.Context, res *result, progress io.Writer) error {
	pub, err := r.openSource(ctx)
	if err != nil {
		return err
	}
	defer pub.close()
	wait := 10 * time.Second
	if op, ok := pub.(*outboxPublisher); ok && r.cfg.Burst > 0 {
		res.outbox = op.info
		wait = time.Minute // staging the burst is not timed
		op.beforeCommit = func() { res.burstStart = r.snapshot(ctx) }
		fmt.Fprintf(progress, "connbench: staging %d publications in %d transactions, then committing them at once\n", r.cfg.Burst, r.cfg.Producers)
	} else if ok {
		res.outbox = op.info
		fmt.Fprintf(progress, "connbench: staging %d/s in the outbox (%d producer connections) for %v\n", r.cfg.Rate, r.cfg.Producers, r.cfg.Duration)
	} else {
		fmt.Fprintf(progress, "connbench: publishing %d/s for %v\n", r.cfg.Rate, r.cfg.Duration)
	}
	res.pubStart = r.snapshot(ctx)
	if err := pub.run(ctx, r.cfg.Rate, r.cfg.Duration, wait); err != nil {
		return err
	}
	res.pubEnd = time.Now()
	res.pubDone = r.snapshot(ctx)
	r.resumeStalled()

	// Wait until every subscriber still connected has every offset its
	// channel was given, or the drain bound passes.
	expected := make([]int64, r.cfg.channels())
	for c := range expected {
		expected[c] = int64(len(pub.accepted(c)))
	}
	deadline := time.Now().Add(r.cfg.Drain)
	for {
		waiting := 0
		for _, s := range r.subs {
			if !s.done.Load() && s.got.Load() < expected[s.channel] {
				waiting++
			}
		}
		if waiting == 0 {
			break
		}
		if time.Now().After(deadline) {
			res.drainTimedOut = waiting
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("connbench: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	res.after = r.snapshot(ctx)
	// A line to start and stop a profiler of the server by: the
	// deliveries are done, the subscribers still connected.
	fmt.Fprintf(progress, "connbench: deliveries done (%d subscribers still waiting)\n", res.drainTimedOut)
	res.sent, res.pubErrs, res.maxLag = pub.stats()
	if op, ok := pub.(*outboxPublisher); ok {
		res.txLat = op.tx.summary()
		res.burst = op.burst
	}
	res.accepted = make([][]uint64, len(expected))
	for c := range expected {
		res.accepted[c] = pub.accepted(c)
	}
	return nil
}

// account checks what every subscriber received against what the
// publisher was told was published, once every reader has returned.
func (r *runner) account(res *result) {
	res.closes = make(map[string]int)
	for _, s := range r.subs {
		if s.reason != "" {
			res.closes[s.reason]++
			if s.stalled {
				res.stalledClosed++
			}
		}
		if r.commits != nil {
			r.commits.settle(s)
		}
		res.dups += s.dups
		res.ooo += s.ooo
		res.stale += s.stale + s.beyond
		res.unsubscribed += s.unsub
		delivered := s.got.Load()
		res.delivered += delivered
		if res.accepted == nil {
			continue
		}
		var present int64
		for _, off := range res.accepted[s.channel] {
			if s.has(off) {
				present++
			}
		}
		want := int64(len(res.accepted[s.channel]))
		res.expected += want
		res.unexpected += delivered - present
		if s.reason != "" {
			res.missingClosed += want - present
		} else {
			res.missing += want - present
		}
	}
	res.lat = r.lat.summary()
	if r.commits != nil {
		if ns := r.commits.last.Load(); ns != 0 {
			res.lastDelivery = time.Unix(0, ns)
		}
		res.commitLat = r.commits.lat.summary()
		res.commitLog, res.recvLog = r.commits, r.recv
		res.beforeCommit = r.commits.before.Load()
	}
}

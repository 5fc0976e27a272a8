package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
)

// runner holds one run's connections and what they received.
type runner struct {
	cfg    config
	tgt    *target
	runID  string
	hc     *http.Client
	tr     *http.Transport
	hcSlow *http.Client // stalled subscribers' (a small receive buffer)
	trSlow *http.Transport
	lat    *histogram
	// commits is the outbox publisher's COMMIT times and the commit →
	// client latency; nil with the WebSocket publish op.
	commits *commitLog
	// recv is when each publication was read, by sequence number; only
	// with -stages.
	recv *timeLog

	// streamCtx is the context of every SSE request; stop cancels it.
	streamCtx  context.Context
	cancelStrm context.CancelFunc

	subs     []*subscriber
	resume   chan struct{} // closed when stalled subscribers read again
	resumed  sync.Once
	readers  sync.WaitGroup
	closeMu  sync.Mutex
	closers  []func()
	stopping atomic.Bool
	stopOnce sync.Once

	retryMu sync.Mutex
	retries int64
}

func newRunner(cfg config, tgt *target) *runner {
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	hc, tr := newHTTPClient(0)
	hcSlow, trSlow := newHTTPClient(stalledRcvBuf)
	r := &runner{cfg: cfg, tgt: tgt, runID: hex.EncodeToString(id), hc: hc, tr: tr, hcSlow: hcSlow, trSlow: trSlow, lat: new(histogram)}
	r.streamCtx, r.cancelStrm = context.WithCancel(context.Background())
	r.resume = make(chan struct{})
	var bySeq uint64
	if cfg.PublishVia == "outbox" {
		r.commits = newCommitLog(cfg.publications())
		if cfg.Stages {
			recv := newTimeLog(cfg.publications())
			r.recv = &recv
		}
		bySeq = uint64(cfg.channels())
	}
	for i := range cfg.Conns {
		// The first -stall subscribers stall; i % channels spreads them
		// over the channels like the rest.
		r.subs = append(r.subs, &subscriber{idx: i, channel: i % cfg.channels(), stalled: i < cfg.Stall, bySeq: bySeq})
	}
	return r
}

// received accounts one publication subscriber s read at recv (from its
// reader goroutine) and, with the outbox publisher, its commit → client
// latency.
func (r *runner) received(s *subscriber, p pubInfo, recv time.Time) {
	if s.deliver(p, recv, r.lat) && r.commits != nil && !s.stalled {
		r.commits.observe(s, p.seq, recv)
		if r.recv != nil {
			r.recv.setNs(p.seq, recv.UnixNano())
		}
	}
}

// stalledRcvBuf is a stalled subscriber's socket receive buffer.
const stalledRcvBuf = 16 << 10

// client is the HTTP client subscriber s dials with.
func (r *runner) client(s *subscriber) *http.Client {
	if s != nil && s.stalled {
		return r.hcSlow
	}
	return r.hc
}

// track registers how to close one open connection.
func (r *runner) track(closeFn func()) {
	r.closeMu.Lock()
	r.closers = append(r.closers, closeFn)
	r.closeMu.Unlock()
}

// stop closes every connection and waits for every reader. Safe to call
// twice.
func (r *runner) stop() {
	r.stopOnce.Do(func() {
		r.stopping.Store(true)
		r.resumeStalled()
		r.closeMu.Lock()
		closers := r.closers
		r.closers = nil
		r.closeMu.Unlock()
		for _, c := range closers {
			c()
		}
		r.cancelStrm()
		r.readers.Wait()
		r.tr.CloseIdleConnections()
		r.trSlow.CloseIdleConnections()
	})
}

// resumeStalled lets stalled subscribers read again.
func (r *runner) resumeStalled() { r.resumed.Do(func() { close(r.resume) }) }

// snapshot is one reading of the server (and of this process).
type snapshot struct {
	at      time.Time
	rss     int64         // server VmRSS; -1 unknown
	cpu     time.Duration // server utime+stime; -1 unknown
	cpuFrom string
	m       scrape // nil: /metrics not readable
	gen     time.Duration
	genRSS  int64
}

func (r *runner) snapshot(ctx context.Context) snapshot {
	s := snapshot{at: time.Now(), rss: -1, cpu: -1, gen: benchkit.SelfCPU(), genRSS: -1}
	if rss, err := procRSS(os.Getpid()); err == nil {
		s.genRSS = rss
	}
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if m, err := readMetrics(mctx, r.hc, r.tgt.base); err == nil {
		s.m = m
	}
	if r.tgt.pid > 0 {
		if rss, err := procRSS(r.tgt.pid); err == nil {
			s.rss = rss
		}
		if cpu, err := benchkit.ProcCPU(r.tgt.pid); err == nil {
			s.cpu, s.cpuFrom = cpu, fmt.Sprintf("/proc/%d/stat utime+stime", r.tgt.pid)
		}
	}
	if s.cpu < 0 && s.m != nil {
		if v, ok := s.m.value("process_cpu_seconds_total", nil); ok {
			s.cpu, s.cpuFrom = time.Duration(v*float64(time.Second)), "/metrics process_cpu_seconds_total"
		}
	}
	return s
}

// settled takes the baseline snapshot once the server is quiet: its
// goroutine count unchanged over three readings 100 ms apart (at most 3 s).
// Right after start-up or a previous run, connections still closing would
// otherwise be counted against this run's.
func (r *runner) settled(ctx context.Context) snapshot {
	deadline := time.Now().Add(3 * time.Second)
	var prev float64 = -1
	same := 0
	for {
		s := r.snapshot(ctx)
		g, ok := metric(s, "go_goroutines")
		if !ok || time.Now().After(deadline) || ctx.Err() != nil {
			return s
		}
		if g == prev {
			same++
		} else {
			same = 0
		}
		if same == 2 {
			return s
		}
		prev = g
		time.Sleep(100 * time.Millisecond)
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
	"github.com/heraldgw/herald/loadtest/internal/hostinfo"
	"github.com/heraldgw/herald/loadtest/internal/scratchdb"
)

// The poll scenario serves one update stream to -conns clients twice, one
// way after the other, each against a PostgreSQL database of its own on
// -database-url:
//
//   - poll: one producer commits -rate updates/s for -duration into a
//     table (one row per update, in its own transaction: the
//     application's own change); each client asks a poll server, the
//     endpoint an application without push would serve, for its channel's
//     updates after the last id it has, every -poll-interval;
//   - push: the same producer stages the same updates in herald.outbox
//     (outboxfeed.Stage, one transaction each), and a child herald serve
//     on that database delivers them over SSE (the fanout scenario with
//     -publish-via outbox -transport sse).
//
// One producer keeps the ids in commit order, which the poll endpoint's
// cursor (id > after) relies on: with concurrent writers a row with a
// smaller id can commit after a poll read past it and be skipped for
// good, which Herald's outbox cursor is built not to do. For each way it
// reports the staleness every client saw (COMMIT returned → the client
// has the update), the server's and the database's CPU, and the bytes on
// the clients' connections.

// phaseResult is what one way of serving the stream measured, from before
// the first client connected to the end of the drain.
type phaseResult struct {
	name, server string
	updates      int   // committed
	expected     int64 // deliveries due: each client every update of its channel
	delivered    int64
	missing      int64
	dups, ooo    int64
	stale        quantiles
	early        int64 // read before the producer saw its COMMIT return (counted as 0)
	serverCPU    time.Duration
	dbCPU        time.Duration
	wireBytes    int64
	requests     int64 // polls
	emptyPolls   int64
	errors       int64
	serverRSS    int64
	window       time.Duration
}

// runPoll runs both ways and prints them side by side; it returns the
// exit code: 1 when a way failed or missed, repeated or reordered an
// update.
func runPoll(ctx context.Context, cfg config, out, progress io.Writer) int {
	loadStart := hostinfo.LoadAvg()
	poll, push, err := pollAgainstPush(ctx, cfg, progress)
	if err != nil {
		fmt.Fprintln(progress, err)
		return 1
	}
	printPoll(out, cfg, loadStart, hostinfo.LoadAvg(), poll, push)
	code := 0
	for _, p := range []*phaseResult{poll, push} {
		if p.missing+p.dups+p.ooo+p.errors > 0 {
			fmt.Fprintf(progress, "connbench: %s: %d missing, %d repeated, %d out of order, %d failed requests\n",
				p.name, p.missing, p.dups, p.ooo, p.errors)
			code = 1
		}
	}
	return code
}

// pollAgainstPush serves the stream both ways, one after the other.
func pollAgainstPush(ctx context.Context, cfg config, progress io.Writer) (poll, push *phaseResult, err error) {
	if poll, err = runPollPhase(ctx, cfg, progress); err != nil {
		return nil, nil, err
	}
	if push, err = runPushPhase(ctx, cfg, progress); err != nil {
		return nil, nil, err
	}
	return poll, push, nil
}

// runPollPhase serves the stream by polling.
func runPollPhase(ctx context.Context, cfg config, progress io.Writer) (_ *phaseResult, err error) {
	db, err := scratchDB(ctx, cfg.DatabaseURL, "herald_connbench_poll_", "poll", progress)
	if err != nil {
		return nil, err
	}
	defer dropInto(db, &err)
	const table = "updates"
	pool, err := benchkit.OpenPool(ctx, db.URL, 2, "connbench-producer")
	if err != nil {
		return nil, fmt.Errorf("connbench: poll: %w", err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, pollTableDDL(table)); err != nil {
		return nil, fmt.Errorf("connbench: poll: create table: %w", err)
	}
	srv, err := startPollServer(ctx, db.URL, table)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	fmt.Fprintf(progress, "connbench: poll server at %s (pid %d, log %s)\n", srv.base, srv.PID, srv.LogPath)

	total, channels := cfg.publications(), cfg.channels()
	res := &phaseResult{name: "poll every " + cfg.PollInterval.String(), server: "poll server (connbench child: net/http, pgxpool of 8)", updates: total}
	commits := newCommitLog(total)
	var stale histogram
	var early atomic.Int64
	tr := &http.Transport{
		DialContext:         countedDial((&net.Dialer{Timeout: 10 * time.Second}).DialContext),
		DisableCompression:  true,
		MaxIdleConnsPerHost: cfg.Conns,
		IdleConnTimeout:     2*cfg.PollInterval + 10*time.Second,
	}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	pollers := make([]*poller, cfg.Conns)
	for i := range pollers {
		pollers[i] = &poller{channel: i % channels}
	}

	start, cpu0, db0, w0 := time.Now(), srv.cpu(), benchkit.ReadBackends(ctx, pool), wire.total()
	pctx, stopPolling := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, p := range pollers {
		wg.Go(func() { p.run(pctx, hc, srv.base, cfg.PollInterval, channels, commits, &stale, &early) })
	}
	fmt.Fprintf(progress, "connbench: poll: %d clients polling every %v; committing %d updates at %d/s\n", cfg.Conns, cfg.PollInterval, total, cfg.Rate)
	pad := strings.Repeat("x", cfg.PayloadBytes)
	_, _, perr := benchkit.Paced(ctx, cfg.Rate, 1, total, func(k int) (struct{}, error) {
		return struct{}{}, commitUpdate(ctx, pool, table, k, channels, pad, commits)
	})
	if perr != nil {
		stopPolling()
		wg.Wait()
		return nil, fmt.Errorf("connbench: poll: producer: %w", perr)
	}
	// Every client sees the last update within an interval of its COMMIT:
	// wait that long, and -drain more at most.
	deadline := time.Now().Add(cfg.PollInterval + cfg.Drain)
	for time.Now().Before(deadline) && !caughtUp(pollers, total, channels) {
		time.Sleep(20 * time.Millisecond)
	}
	stopPolling()
	wg.Wait()
	res.window = time.Since(start)
	res.serverCPU, res.dbCPU, res.wireBytes = srv.cpu()-cpu0, benchkit.ReadBackends(ctx, pool).Since(db0), wire.total()-w0
	res.serverRSS, _ = procRSS(srv.PID)
	for _, p := range pollers {
		due := int64(updatesOf(p.channel, total, channels))
		res.expected += due
		res.delivered += p.got
		res.missing += due - p.got
		res.dups += p.dups
		res.ooo += p.ooo
		res.requests += p.polls
		res.emptyPolls += p.empty
		res.errors += p.errors
		if p.lastErr != nil {
			fmt.Fprintf(progress, "connbench: poll: client on channel %d: %d failed requests, the last: %v\n", p.channel, p.errors, p.lastErr)
		}
	}
	res.stale, res.early = stale.summary(), early.Load()
	return res, nil
}

// commitUpdate commits update k as its own transaction, as the
// application's change, and records when COMMIT returned.
func commitUpdate(ctx context.Context, pool *pgxpool.Pool, table string, k, channels int, pad string, commits *commitLog) error {
	data := appendData(nil, time.Now(), int64(k), pad)
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (channel, payload) VALUES ($1, $2)", k%channels, string(data)); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	commits.set(uint64(k), time.Now())
	return nil
}

// updatesOf is how many of total updates, published round-robin, go to
// channel c.
func updatesOf(c, total, channels int) int {
	if c >= total {
		return 0
	}
	return (total-1-c)/channels + 1
}

// caughtUp reports whether every poller has the last update of its
// channel.
func caughtUp(pollers []*poller, total, channels int) bool {
	for _, p := range pollers {
		n := updatesOf(p.channel, total, channels)
		if n > 0 && p.caughtUpAt.Load() < int64(p.channel+(n-1)*channels) {
			return false
		}
	}
	return true
}

// runPushPhase serves the same stream over SSE through Herald's outbox:
// the fanout scenario with -publish-via outbox -transport sse and one
// producer, on a database of its own.
func runPushPhase(ctx context.Context, cfg config, progress io.Writer) (_ *phaseResult, err error) {
	cfg.Scenario, cfg.Transport, cfg.PublishVia, cfg.Producers = "fanout", "sse", "outbox", 1
	db, err := scratchDB(ctx, cfg.DatabaseURL, "herald_connbench_", "push", progress)
	if err != nil {
		return nil, err
	}
	defer dropInto(db, &err)
	cfg.DatabaseURL = db.URL
	tgt, err := startChild(ctx, cfg, progress)
	if err != nil {
		return nil, err
	}
	defer func() {
		if serr := tgt.stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	fmt.Fprintf(progress, "connbench: push: %s at %s (log %s)\n", tgt.desc, tgt.base, tgt.child.LogPath)
	stats, err := benchkit.OpenPool(ctx, db.URL, 1, "connbench-stats")
	if err != nil {
		return nil, fmt.Errorf("connbench: push: %w", err)
	}
	defer stats.Close()

	start, db0, w0 := time.Now(), benchkit.ReadBackends(ctx, stats), wire.total()
	cpu0, _ := benchkit.ProcCPU(tgt.pid)
	res, err := run(ctx, cfg, tgt, progress)
	if err != nil {
		return nil, err
	}
	cpu1, _ := benchkit.ProcCPU(tgt.pid)
	p := &phaseResult{
		name: "SSE push", server: tgt.desc, updates: res.published(),
		expected: res.expected, delivered: res.delivered, missing: res.missing + res.missingClosed,
		dups: res.dups, ooo: res.ooo, stale: res.commitLat, early: res.beforeCommit,
		serverCPU: cpu1 - cpu0, dbCPU: benchkit.ReadBackends(ctx, stats).Since(db0), wireBytes: wire.total() - w0,
		window: time.Since(start), serverRSS: res.after.rss,
	}
	if err := res.integrity(); err != nil {
		fmt.Fprintln(progress, err)
		p.errors++
	}
	return p, nil
}

// scratchDB creates a database of one phase's own, said in progress.
func scratchDB(ctx context.Context, adminURL, prefix, phase string, progress io.Writer) (*scratchdb.DB, error) {
	db, err := scratchdb.Create(ctx, adminURL, prefix)
	if err == nil {
		fmt.Fprintf(progress, "connbench: %s: database %s (dropped at the end)\n", phase, db.Name)
	}
	return db, err
}

// dropInto drops db, setting *err to the failure unless it holds one.
func dropInto(db *scratchdb.DB, err *error) {
	if derr := db.Drop(); derr != nil && *err == nil {
		*err = derr
	}
}

// pollServer is the poll server child.
type pollServer struct {
	*benchkit.Child
	base string
}

// startPollServer starts connbench itself as the poll server on a free
// loopback port and waits until it answers.
func startPollServer(ctx context.Context, dbURL, table string) (*pollServer, error) {
	port, err := benchkit.FreePort()
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("connbench: poll server: %w", err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %s", pollServerEnv, addr, dbURL, table))
	child, err := benchkit.StartChild(cmd, filepath.Join(os.TempDir(), fmt.Sprintf("connbench-poll-%d.log", port)), nil)
	if err != nil {
		return nil, fmt.Errorf("connbench: poll server: %w", err)
	}
	s := &pollServer{Child: child, base: "http://" + addr}
	err = benchkit.PollUntil(ctx, 10*time.Second, 20*time.Millisecond, errors.New("connbench: the poll server did not answer within 10s"), func() (bool, error) {
		if !s.Alive() {
			return false, fmt.Errorf("connbench: the poll server exited (log %s)", s.LogPath)
		}
		resp, err := http.Get(s.base + "/healthz")
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// cpu is the poll server's CPU time so far.
func (s *pollServer) cpu() time.Duration {
	d, _ := benchkit.ProcCPU(s.PID)
	return d
}

// stop ends the poll server and waits for it.
func (s *pollServer) stop() { s.Stop(10 * time.Second) }

// printPoll prints both ways side by side.
func printPoll(w io.Writer, cfg config, loadStart, loadEnd string, poll, push *phaseResult) {
	fmt.Fprintf(w, "\n### Polling against push: %d clients, %d channels, %d updates/s for %v, %s\n\n",
		cfg.Conns, cfg.channels(), cfg.Rate, cfg.Duration, time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(w, "- machine: %s\n", hostinfo.Machine())
	fmt.Fprintf(w, "- load average (1/5/15 min) at start: %s, at end: %s\n", loadStart, loadEnd)
	fmt.Fprintf(w, "- command: `%s`\n", commandLine())
	fmt.Fprintf(w, "- each way from before the first client connects to the end of the drain; one producer commits every update in its own transaction\n\n")
	fmt.Fprintf(w, "| measurement | %s | %s |\n|---|---|---|\n", poll.name, push.name)
	row := func(k string, f func(p *phaseResult) string) {
		fmt.Fprintf(w, "| %s | %s | %s |\n", k, f(poll), f(push))
	}
	row("server", func(p *phaseResult) string { return p.server })
	row("updates committed / deliveries (due)", func(p *phaseResult) string {
		return fmt.Sprintf("%d / %d (%d)", p.updates, p.delivered, p.expected)
	})
	row("missing, repeated, out of order, failed requests", func(p *phaseResult) string {
		return fmt.Sprintf("%d, %d, %d, %d", p.missing, p.dups, p.ooo, p.errors)
	})
	row("staleness, COMMIT → client has it: p50 / p90 / p99 / max", func(p *phaseResult) string {
		return fmt.Sprintf("**%s** / %s / **%s** / %s", ms(p.stale.P50), ms(p.stale.P90), ms(p.stale.P99), ms(p.stale.Max))
	})
	row("server CPU (per delivery)", func(p *phaseResult) string {
		return fmt.Sprintf("%.2f s (%s)", p.serverCPU.Seconds(), perDelivery(p.serverCPU, p.delivered))
	})
	row("PostgreSQL CPU, the run's database's backends (per update)", func(p *phaseResult) string {
		return fmt.Sprintf("%.2f s (%s)", p.dbCPU.Seconds(), perDelivery(p.dbCPU, int64(p.updates)))
	})
	row("bytes on the clients' connections, both ways (per delivery)", func(p *phaseResult) string {
		return fmt.Sprintf("%s (%s)", mib(float64(p.wireBytes)), perDeliveryBytes(p.wireBytes, p.delivered))
	})
	row("requests (empty)", func(p *phaseResult) string {
		if p.requests == 0 {
			return "— (one stream per client)"
		}
		return fmt.Sprintf("%d (%d, %.0f %%)", p.requests, p.emptyPolls, 100*float64(p.emptyPolls)/float64(p.requests))
	})
	row("server RSS at the end", func(p *phaseResult) string { return mib(float64(p.serverRSS)) })
	row("measured over", func(p *phaseResult) string { return fmt.Sprintf("%.1f s", p.window.Seconds()) })
	fmt.Fprintln(w)
}

func perDelivery(d time.Duration, n int64) string {
	if n == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f µs", float64(d.Microseconds())/float64(n))
}

func perDeliveryBytes(b, n int64) string {
	if n == 0 {
		return "—"
	}
	return fmt.Sprintf("%d B", b/n)
}

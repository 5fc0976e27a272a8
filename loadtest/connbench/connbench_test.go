package main

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/loadtest/internal/benchtest"
	"github.com/heraldgw/herald/loadtest/internal/scratchdb"
)

// testWriter sends progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// startServer starts a child herald serve for one test and stops it (and
// fails the test if it did not exit cleanly) when the test ends.
func startServer(t *testing.T, cfg config) *target {
	t.Helper()
	cfg.HeraldBin = heraldBin
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tgt, err := startChild(ctx, cfg, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tgt.stop(); err != nil {
			t.Error(err)
		}
		if tgt.alive() {
			t.Errorf("herald serve (pid %d) still running after stop", tgt.pid)
		}
	})
	return tgt
}

// tiny is a small, fast run of scenario over transport.
func tiny(scenario, transport string) config {
	cfg := defaultConfig()
	cfg.Scenario, cfg.Transport = scenario, transport
	cfg.Conns, cfg.Channels, cfg.Rate = 50, 5, 50
	cfg.Duration, cfg.Drain, cfg.ConnectTimeout = time.Second, 5*time.Second, 30*time.Second
	return cfg
}

func runTiny(t *testing.T, cfg config, tgt *target) *result {
	t.Helper()
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := run(ctx, cfg, tgt, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(report(res))
	return res
}

// report is res's report, as run prints it.
func report(res *result) string {
	var out bytes.Buffer
	res.print(&out)
	return out.String()
}

// checkDelivery asserts that every subscriber received every publication
// of its channel, once, in order, with a measured latency, and that no
// connection was closed by the server.
func checkDelivery(t *testing.T, res *result, wantPublished, wantPerSub int) {
	t.Helper()
	if got := res.published(); got != wantPublished || res.sent != wantPublished {
		t.Errorf("published %d (sent %d), want %d", got, res.sent, wantPublished)
	}
	want := int64(res.cfg.Conns * wantPerSub)
	if res.expected != want || res.delivered != want {
		t.Errorf("delivered %d of %d expected, want %d", res.delivered, res.expected, want)
	}
	if res.missing+res.missingClosed+res.dups+res.ooo+res.stale+res.unexpected != 0 {
		t.Errorf("missing %d+%d, duplicate %d, out of order %d, never published %d+%d: want all 0",
			res.missing, res.missingClosed, res.dups, res.ooo, res.stale, res.unexpected)
	}
	if err := res.integrity(); err != nil {
		t.Error(err)
	}
	if len(res.closes) != 0 || res.drainTimedOut != 0 {
		t.Errorf("server closed %v; %d subscribers still waiting after the drain", res.closes, res.drainTimedOut)
	}
	if res.lat.N != want || res.lat.Min <= 0 || res.lat.P50 < res.lat.Min || res.lat.Max < res.lat.P999 || res.lat.Max > 10*time.Second {
		t.Errorf("latency %+v: want %d samples, 0 < min ≤ p50 ≤ … ≤ max < 10s", res.lat, want)
	}
	// The server's own count of what it wrote agrees with ours.
	match := map[string]string{"transport": res.cfg.Transport}
	d1, ok1 := res.after.m.value("herald_deliveries_total", match)
	d0, ok0 := res.before.m.value("herald_deliveries_total", match)
	if !ok0 || !ok1 || int64(d1-d0) != want {
		t.Errorf("herald_deliveries_total rose by %v (found %v/%v), want %d", d1-d0, ok0, ok1, want)
	}
	if cpu, ok := cpuDelta(res.pubStart, res.after); !ok || cpu <= 0 {
		t.Errorf("server CPU over publishing %v (measured %v), want > 0", cpu, ok)
	}
}

func TestIdleReportsMemoryPerConnection(t *testing.T) {
	cfg := tiny("idle", "ws")
	res := runTiny(t, cfg, startServer(t, cfg))
	// Both readings, not their order: 50 parked connections are a few
	// hundred KiB, and the runtime may return more than that to the
	// kernel between the readings (a run in CI read 96 KiB less after).
	if res.before.rss <= 0 || res.after.rss <= 0 {
		t.Errorf("server RSS before %d, after %d: want both read", res.before.rss, res.after.rss)
	}
	for _, name := range []string{"go_memstats_heap_inuse_bytes", "go_memstats_stack_inuse_bytes", "go_goroutines"} {
		if _, ok := metric(res.after, name); !ok {
			t.Errorf("/metrics has no %s", name)
		}
	}
	// An idle WebSocket holds no goroutine on the server on Linux: its
	// connection waits parked on the shared poller (docs/performance.md);
	// elsewhere it holds its reader goroutine. The baseline is taken once
	// the server's goroutine count is steady.
	g0, _ := metric(res.before, "go_goroutines")
	g1, _ := metric(res.after, "go_goroutines")
	if runtime.GOOS == "linux" && g1-g0 >= float64(cfg.Conns) {
		t.Errorf("server goroutines %v → %v: want the %d idle connections parked, without a goroutine each", g0, g1, cfg.Conns)
	} else if runtime.GOOS != "linux" && g1-g0 < float64(cfg.Conns) {
		t.Errorf("server goroutines %v → %v: want at least one per connection (%d)", g0, g1, cfg.Conns)
	}
	conns, _ := res.after.m.value("herald_connections", map[string]string{"transport": "ws"})
	if conns != float64(cfg.Conns) {
		t.Errorf("herald_connections{transport=ws} = %v while holding, want %d", conns, cfg.Conns)
	}
	if len(res.closes) != 0 {
		t.Errorf("server closed idle connections: %v", res.closes)
	}
	benchtest.ReportHas(t, report(res), "server RSS (VmRSS) before / after / per connection", "go_memstats_heap_inuse_bytes", "go_goroutines")
}

func TestBroadcastWebSocket(t *testing.T) {
	cfg := tiny("broadcast", "ws")
	res := runTiny(t, cfg, startServer(t, cfg))
	if res.channels != 1 {
		t.Fatalf("broadcast used %d channels", res.channels)
	}
	// 50/s for 1 s, all on the one channel every subscriber follows.
	checkDelivery(t, res, 50, 50)
}

func TestFanoutWebSocket(t *testing.T) {
	cfg := tiny("fanout", "ws")
	res := runTiny(t, cfg, startServer(t, cfg))
	// 50 publications round-robin over 5 channels: 10 per channel, and
	// each subscriber follows one.
	checkDelivery(t, res, 50, 10)
	for c, offs := range res.accepted {
		if len(offs) != 10 {
			t.Errorf("channel %d: %d publications accepted, want 10", c, len(offs))
		}
	}
}

// TestBroadcastSSEByURL targets the child as a running server (-url and
// -jwt-secret, no pid): CPU and RSS then come from /metrics.
func TestBroadcastSSEByURL(t *testing.T) {
	child := startServer(t, tiny("broadcast", "sse"))
	cfg := tiny("broadcast", "sse")
	cfg.URL, cfg.Secret = child.base, child.secret
	res := runTiny(t, cfg, remoteTarget(cfg))
	checkDelivery(t, res, 50, 50)
	if res.after.cpuFrom != "/metrics process_cpu_seconds_total" {
		t.Errorf("CPU read from %q, want /metrics without a pid", res.after.cpuFrom)
	}
}

// TestStalledSubscribersCatchUp stalls two subscribers (they stop reading,
// with a small receive buffer, until publishing ends) behind a 32-message
// send queue. 12 MB per subscriber (200 publications of 60 kB) outgrow
// what the kernel buffers for a stalled one plus its queue, so their queues
// drop publications; once they read again they catch up from the channel
// history. Every subscriber, the stalled ones too, receives everything
// once and in order, and the server closes none.
func TestStalledSubscribersCatchUp(t *testing.T) {
	cfg := tiny("broadcast", "ws")
	cfg.Conns, cfg.Stall, cfg.Rate, cfg.PayloadBytes = 8, 2, 100, 60_000
	cfg.Duration = 2 * time.Second
	cfg.ServeArgs = []string{"--queue-max-messages=32"}
	res := runTiny(t, cfg, startServer(t, cfg))

	closed := diff(res.after.m.byLabel("herald_disconnects_total", "reason", map[string]string{"transport": "ws"}),
		res.before.m.byLabel("herald_disconnects_total", "reason", map[string]string{"transport": "ws"}))
	if len(closed) != 0 {
		t.Errorf("server disconnects %v, want none", closed)
	}
	if sumInts(res.closes) != 0 {
		t.Errorf("closed: %v, want none", res.closes)
	}
	catchUps := diff(res.after.m.byLabel("herald_catch_ups_total", "transport", nil),
		res.before.m.byLabel("herald_catch_ups_total", "transport", nil))
	if catchUps["ws"] < 2 {
		t.Errorf("catch-ups %v, want at least one per stalled subscriber", catchUps)
	}
	if err := res.integrity(); err != nil {
		t.Error(err) // every subscriber, stalled or not, lost, repeated and reordered nothing
	}
	if res.lat.N != 6*200 {
		t.Errorf("%d latency samples, want 1200 (the stalled subscribers' are left out)", res.lat.N)
	}
}

// outboxDB creates a run database on the test PostgreSQL server the way a
// run does (scratchdb) and drops it when the test ends, after the child
// (whose cleanup, registered later, runs first).
func outboxDB(t *testing.T) *scratchdb.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := scratchdb.Create(ctx, testenv.BaseDatabaseURL(), "herald_connbench_")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Drop(); err != nil {
			t.Error(err)
		}
	})
	return db
}

// TestBroadcastViaOutbox stages each of 50 publications in its own
// transaction in the outbox of a fresh PostgreSQL database; the child's
// Worker (default settings) must deliver every one to each of the 50
// subscribers once and in order, and every delivery must have a commit →
// client latency, never above its BEGIN → client latency.
func TestBroadcastViaOutbox(t *testing.T) {
	cfg := tiny("broadcast", "ws")
	cfg.PublishVia, cfg.DatabaseURL, cfg.Producers = "outbox", outboxDB(t).URL, 4
	res := runTiny(t, cfg, startServer(t, cfg))
	checkDelivery(t, res, 50, 50)
	want := int64(cfg.Conns * 50)
	c := res.commitLat
	if c.N != want || c.P50 <= 0 || c.P50 > c.P90 || c.P90 > c.P99 || c.P99 > c.P999 || c.P999 > c.Max || c.Max > 10*time.Second {
		t.Errorf("commit → client latency %+v: want %d samples, 0 < p50 ≤ p90 ≤ … ≤ max < 10s", c, want)
	}
	// Per delivery, COMMIT returned after BEGIN, so its latency is the
	// smaller: a mismatched sequence number would break this.
	if c.Max > res.lat.Max || c.P50 > res.lat.P50 {
		t.Errorf("commit → client %+v exceeds BEGIN → client %+v", c, res.lat)
	}
	if res.beforeCommit >= want {
		t.Errorf("%d of %d deliveries read before their COMMIT returned", res.beforeCommit, want)
	}
	if tx := res.txLat; tx.N != 50 || tx.Min <= 0 {
		t.Errorf("staging transactions %+v: want 50, each > 0", tx)
	}
	benchtest.ReportHas(t, report(res), "publish path measured: outbox", "latency outbox COMMIT returned → subscriber receive", "read before their COMMIT returned, counted as 0", "producer BEGIN → subscriber receive")
}

// TestBurstViaOutbox commits 5,000 publications over 50 SSE subscribers'
// channels in 4 transactions at once; the child's Worker must deliver every
// one once and in order, and the report gives the drain from the first
// COMMIT to the last delivery, which cannot precede the last COMMIT.
func TestBurstViaOutbox(t *testing.T) {
	cfg := tiny("fanout", "sse")
	cfg.Channels = cfg.Conns
	cfg.PublishVia, cfg.DatabaseURL, cfg.Producers, cfg.Burst = "outbox", outboxDB(t).URL, 4, 5000
	res := runTiny(t, cfg, startServer(t, cfg))
	checkDelivery(t, res, 5000, 100)
	b := res.burst
	if b.txs != 4 || b.firstCommit.IsZero() || b.lastCommit.Before(b.firstCommit) {
		t.Errorf("burst %+v: want 4 transactions, first COMMIT ≤ last", b)
	}
	if res.lastDelivery.Before(b.lastCommit) {
		t.Errorf("last delivery %v before the last COMMIT returned %v", res.lastDelivery, b.lastCommit)
	}
	if c := res.commitLat; c.N != 5000 || c.Max > res.lastDelivery.Sub(b.firstCommit) {
		t.Errorf("commit → client %+v: want 5,000 samples, none above the drain %v", c, res.lastDelivery.Sub(b.firstCommit))
	}
	if cpu, ok := cpuDelta(res.burstStart, res.after); !ok || cpu < 0 || res.burstStart.at.After(b.firstCommit) {
		t.Errorf("server CPU over the drain %v (measured %v), snapshot at %v: want ≥ 0, taken before the first COMMIT %v", cpu, ok, res.burstStart.at, b.firstCommit)
	}
	benchtest.ReportHas(t, report(res), "5000 publications over 50 channels in 4 transactions", "drain, first COMMIT → last delivery", "server CPU from just before the commits to every delivery")
}

// TestStagesViaOutbox runs a diagnostic child (-tags heraldstages): every
// publication's commit → client is split into the Worker's, the broker's
// and the client's stages, which add up to it.
func TestStagesViaOutbox(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := buildHerald(ctx, t.TempDir(), true)
	if err != nil {
		t.Fatal(err)
	}
	cfg := tiny("fanout", "ws")
	cfg.PublishVia, cfg.DatabaseURL, cfg.Producers, cfg.Stages = "outbox", outboxDB(t).URL, 4, true
	cfg.HeraldBin = bin
	tgt, err := startChild(ctx, cfg, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tgt.stop() })
	res := runTiny(t, cfg, tgt)
	checkDelivery(t, res, 50, 10)
	if err := addStages(res, tgt); err != nil {
		t.Fatal(err)
	}
	st := res.stages
	// Each of the 50 publications went to the 10 subscribers of its
	// channel; the last read is kept.
	if st.n != 50 || st.tailN < 1 {
		t.Fatalf("stages of %d publications, tail %d: want 50, ≥ 1", st.n, st.tailN)
	}
	if len(st.worker) != 50 || len(st.broker) != 50 || len(st.client) != 50 || len(st.total) != 50 {
		t.Fatalf("stage samples %d/%d/%d/%d, want 50 each", len(st.worker), len(st.broker), len(st.client), len(st.total))
	}
	// Per publication the stages add up to the whole (a negative one
	// counts as 0, which only makes them add up to more), so the slowest
	// whole is at most the slowest stages together.
	if top, sum := sortedQuantile(st.total, 1), sortedQuantile(st.worker, 1)+sortedQuantile(st.broker, 1)+sortedQuantile(st.client, 1); top > sum {
		t.Errorf("slowest commit → read %d ns above its stages' maxima together %d ns", top, sum)
	}
	if sortedQuantile(st.total, 1) > 10*int(time.Second) {
		t.Errorf("commit → read max %v", time.Duration(sortedQuantile(st.total, 1)))
	}
	benchtest.ReportHas(t, report(res), "COMMIT returned → Worker hands to broker", "broker Publish", "tail: the publications at or above the p99")
}

// TestOutboxNeedsTheServersDatabase: a database the server never migrated
// (with -url, not the one the server uses) is refused before the run.
func TestOutboxNeedsTheServersDatabase(t *testing.T) {
	db := outboxDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := openProducerPool(ctx, db.URL, 2, heraldOutbox)
	if err == nil {
		pool.Close()
		t.Fatal("a database without herald.outbox was accepted")
	}
	if !strings.Contains(err.Error(), "has no herald.outbox") {
		t.Errorf("error %v, want one saying the database has no herald.outbox", err)
	}
}

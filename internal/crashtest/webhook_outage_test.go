package crashtest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed/stage"

	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	// outageRate is the records per second staged on each outbox while
	// latency is measured: a modest, steady flow, one record per
	// transaction.
	outageRate = 50
	// outageLength is how long the endpoint is down, with records flowing.
	outageLength = 60 * time.Second
	// outageWarmup is how many of a process's first records are left out
	// of its latency: a fresh process's first deliveries (connections
	// being made, code run for the first time) are not its steady state.
	outageWarmup = 50
	// outageFloor99 and outageFloor90 are the slack added to the 1.5×
	// bounds of the p99 and the p90 (see checkOutageLatency).
	outageFloor99 = 50 * time.Millisecond
	outageFloor90 = 20 * time.Millisecond
)

// outageChannels are the channels the outage test stages on.
var outageChannels = []string{"outage/c0", "outage/c1", "outage/c2", "outage/c3", "outage/c4",
	"outage/c5", "outage/c6", "outage/c7", "outage/c8", "outage/c9"}

// TestWebhookOutageKeepsRealtime runs two `herald serve` processes side by
// side, each on an outbox of its own with an SSE client subscribed: one
// without a webhook handler, one with a webhook handler whose endpoint
// answers 503 throughout a 60s outage. Both get 50 records/s, one per
// transaction, for those 60s. During the outage no attempt is burnt,
// nothing is dead-lettered and /readyz stays 200; realtime's commit →
// client p99 with the failing handler stays within 1.5× (see
// checkOutageLatency) of its p99 without one; once the endpoint is back
// every record reaches it, signed.
//
// The two are measured at the same time, not one after the other, so
// that what else this shared machine runs weighs on both alike.
func TestWebhookOutageKeepsRealtime(t *testing.T) {
	secret := "crashtest-secret-of-32-bytes-" + testenv.Suffix()
	token := strings.TrimSpace(runHerald(t, 30*time.Second, "token", "--jwt-hmac-secret", secret,
		"--tenant", testTenant, "--sub", "crashtest", "--subscribe", "outage/*", "--ttl", "10m"))
	rc := newHookReceiver(0)
	rc.down.Store(true)
	srv := httptest.NewServer(rc)
	defer srv.Close()
	start := func(name string, extra ...string) *latencyRun {
		dbURL := testenv.DatabaseURL(t)
		runHerald(t, time.Minute, "migrate", "--database-url", dbURL)
		args := append([]string{"serve", "--database-url", dbURL, "--listen", "127.0.0.1:0",
			"--jwt-hmac-secret", secret, "--data-dir", t.TempDir()}, extra...)
		return newLatencyRun(t, startServing(t, name, args...), token, openPool(t, dbURL, 4))
	}
	alone := start("serve-alone")
	withHook := start("serve-webhook", "--handlers", hookHandlers(srv.URL+"/hook", "2s"))

	outageStart := time.Now()
	n := int(outageLength.Seconds() * outageRate)
	errs := make(chan error, 2)
	go func() { errs <- alone.stage(n) }()
	go func() { errs <- withHook.stage(n) }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	base, during := alone.latencies(t), withHook.latencies(t)
	ids := withHook.ids

	// The endpoint has been down for the whole run: it was tried, backing
	// off, got nothing, and no record was charged for it. Each of the
	// handler's lanes (4, the default) sends at most one request per
	// channel of the batch it holds, then waits at least half of
	// min(2s, 100ms × 2^(f−1)) after its f-th outage answer in a row: at
	// most about outage/1s + 8 rounds per lane. Trying at every commit
	// instead would be some 50 rounds a second.
	outage := time.Since(outageStart)
	rounds := int(outage/time.Second) + 8
	if n := rc.refused.Load(); n == 0 || n > int64(4*len(outageChannels)*rounds) {
		t.Fatalf("the webhook endpoint got %d requests during the %v outage; want 1 to %d (4 lanes × %d channels × %d rounds)",
			n, outage.Round(time.Millisecond), 4*len(outageChannels)*rounds, len(outageChannels), rounds)
	}
	if reqs, _ := rc.snapshot(); len(reqs) != 0 {
		t.Fatalf("the receiver accepted %d requests while answering 503", len(reqs))
	}
	hs := hookStates(t, withHook.pool)
	if hs.dispatched != 0 || hs.burnt != 0 || hs.dead != 0 || hs.total != len(ids) {
		t.Fatalf("during the outage the webhook handler has %+v; want all %d records waiting, none dispatched, none with an attempt burnt, none dead-lettered",
			hs, len(ids))
	}
	if code, err := httpStatus(withHook.srv.url + "/readyz"); err != nil || code != http.StatusOK {
		t.Fatalf("/readyz during the webhook outage: %d %v, want 200", code, err)
	}
	rc.down.Store(false)
	t.Logf("endpoint down for %v: %d requests answered 503; the %d records wait with no attempt burnt",
		outage.Round(time.Millisecond), rc.refused.Load(), len(ids))

	back := time.Now()
	waitUntil(t, 60*time.Second, 50*time.Millisecond, "every record delivered to the webhook after the outage", func() (bool, error) {
		hs := hookStates(t, withHook.pool)
		if hs.burnt != 0 || hs.dead != 0 {
			t.Fatalf("after the outage the webhook handler has %+v: an attempt burnt or a record dead-lettered", hs)
		}
		got := rc.received(ids)
		return hs.dispatched == len(ids) && got == len(ids), fmt.Errorf("%d dispatched, %d received of %d", hs.dispatched, got, len(ids))
	})
	reqs, byID := rc.snapshot()
	for _, r := range reqs {
		if !r.signed || r.bodyID != r.id {
			t.Fatalf("request %d for %s: signature verified %v, body id %q", r.seq, r.id, r.signed, r.bodyID)
		}
	}
	t.Logf("all %d records delivered to the webhook %v after it came back (%d requests, %d distinct ids)",
		len(ids), time.Since(back).Round(time.Millisecond), len(reqs), len(byID))
	checkOutageLatency(t, base, during)
}

// servingProc is a `herald serve` process and its base URL.
type servingProc struct {
	*proc
	url string
}

// startServing starts `herald serve` with args and waits until /readyz
// is 200.
func startServing(t *testing.T, name string, args ...string) servingProc {
	t.Helper()
	p := startHerald(t, name, args...)
	srv := servingProc{p, "http://" + p.waitStdout(t, serveBanner, 30*time.Second)[1]}
	waitReadyz(t, srv.url, http.StatusOK, 15*time.Second)
	return srv
}

// latencyRun stages records into one serve's outbox and times their
// arrival at an SSE client of it.
type latencyRun struct {
	srv       servingProc
	sse       *sseClient
	pool      *pgxpool.Pool
	ids       []string             // staged, in order
	committed map[string]time.Time // id → when its COMMIT returned
}

// newLatencyRun subscribes an SSE client to outageChannels on srv.
func newLatencyRun(t *testing.T, srv servingProc, token string, pool *pgxpool.Pool) *latencyRun {
	t.Helper()
	sse := openSSE(t, srv.url, token, outageChannels)
	waitUntil(t, 10*time.Second, 10*time.Millisecond, srv.name+"'s SSE subscribed events", func() (bool, error) {
		sub, _, _, ended := sse.state()
		if ended != nil {
			t.Fatalf("%s: sse stream ended: %v", srv.name, ended)
		}
		return sub == len(outageChannels), fmt.Errorf("%d subscribed", sub)
	})
	return &latencyRun{srv: srv, sse: sse, pool: pool, committed: map[string]time.Time{}}
}

// stage stages n records at outageRate, one per transaction, round the
// channels, noting when each commit returned.
func (r *latencyRun) stage(n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Duration(n)*time.Second/outageRate)
	defer cancel()
	tick := time.NewTicker(time.Second / outageRate)
	defer tick.Stop()
	for i := range n {
		<-tick.C
		rec, note := newRecord(outageChannels[i%len(outageChannels)], i)
		if err := stageTx(ctx, r.pool, []stage.Notification{note}); err != nil {
			return fmt.Errorf("%s: stage record %d: %w", r.srv.name, i, err)
		}
		r.committed[rec.ID] = time.Now()
		r.ids = append(r.ids, rec.ID)
	}
	return nil
}

// latencies waits for every staged record at the SSE client and returns
// their commit → client latencies past the warm-up.
func (r *latencyRun) latencies(t *testing.T) []time.Duration {
	t.Helper()
	waitUntil(t, 30*time.Second, 10*time.Millisecond, "every record at "+r.srv.name+"'s SSE client", func() (bool, error) {
		if _, _, _, ended := r.sse.state(); ended != nil {
			t.Fatalf("%s: sse stream ended: %v", r.srv.name, ended)
		}
		missing := 0
		for _, id := range r.ids {
			if _, ok := r.sse.arrivedAt(id); !ok {
				missing++
			}
		}
		return missing == 0, fmt.Errorf("%d of %d not delivered", missing, len(r.ids))
	})
	lat := make([]time.Duration, 0, len(r.ids))
	for _, id := range r.ids[outageWarmup:] {
		at, _ := r.sse.arrivedAt(id)
		lat = append(lat, at.Sub(r.committed[id]))
	}
	return lat
}

// hookCounts are the webhook handler's records by state.
type hookCounts struct {
	total, dispatched, dead, burnt int // burnt: with an attempt > 0
}

func hookStates(t *testing.T, pool *pgxpool.Pool) hookCounts {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var c hookCounts
	if err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state = 'dispatched'),
		count(*) FILTER (WHERE state = 'dead_letter'), count(*) FILTER (WHERE attempt > 0)
		FROM herald.outbox_records WHERE handler = 'hooks'`).Scan(&c.total, &c.dispatched, &c.dead, &c.burnt); err != nil {
		t.Fatalf("webhook handler states: %v", err)
	}
	return c
}

// percentile is the q-quantile (0 < q ≤ 1) of ds, by the nearest-rank
// method.
func percentile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*q+0.999999) - 1
	return s[max(i, 0)]
}

// checkOutageLatency compares realtime's commit → client latency beside
// the webhook outage with its latency without a webhook handler, over the
// same minute.
//
// The bounds are max(1.5 × base, base + floor), for the p99 (the demand)
// and for the p90. Realtime's latency on loopback is a few milliseconds,
// where 1.5× is a fraction of a millisecond: less than one scheduling
// delay of this 2-core machine, which other test processes share (load
// averages of 20 are usual while the suite runs). The p99 of ~2,950
// samples is their 30th worst, and there those delays rule: two identical
// processes side by side show p99s tens of milliseconds apart
// (outageFloor99 = 50ms), while the p90 moves by a few (outageFloor90 =
// 20ms). The floors keep the assertion about the handler — a webhook
// outage that held realtime back would add claim rounds and backoff waits
// (100ms to seconds) to every record, moving the p90 and the p99 alike —
// and not about the machine's noise.
func checkOutageLatency(t *testing.T, base, during []time.Duration) {
	t.Helper()
	t.Logf("realtime commit → client without a webhook handler: p50 %v p90 %v p99 %v max %v (%d samples)",
		percentile(base, 0.5), percentile(base, 0.9), percentile(base, 0.99), percentile(base, 1), len(base))
	t.Logf("realtime commit → client beside the webhook outage: p50 %v p90 %v p99 %v max %v (%d samples)",
		percentile(during, 0.5), percentile(during, 0.9), percentile(during, 0.99), percentile(during, 1), len(during))
	for _, c := range []struct {
		q     float64
		floor time.Duration
	}{{0.99, outageFloor99}, {0.9, outageFloor90}} {
		b, d := percentile(base, c.q), percentile(during, c.q)
		if bound := max(b*3/2, b+c.floor); d > bound {
			t.Errorf("realtime's p%.0f beside the webhook outage is %v, over max(1.5 × %v, %v + %v) = %v",
				c.q*100, d, b, b, c.floor, bound)
		}
	}
}

package crashtest

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldgw/herald/outboxfeed/stage"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldgw/herald/internal/testenv"
)

// serveBanner is the first line `herald serve` prints.
var serveBanner = regexp.MustCompile(`listening on http://(\S+) `)

// restartChannels are the channels the restart test stages on.
var restartChannels = []string{"feed/c0", "feed/c1", "feed/c2", "feed/c3"}

// Phases of the restart test a commit can belong to.
const (
	phaseBefore = iota // PostgreSQL up, before the stop
	phaseDown          // between stop and start (no commit can succeed)
	phaseAfter         // after the start
	phases
)

// restartProducer stages one record per transaction every few
// milliseconds, through the outage, and remembers what committed.
type restartProducer struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	phase     int
	committed [phases][]string // ids whose COMMIT succeeded, per phase
	uncertain []string         // ids whose transaction failed (may or may not have committed)
	failures  int
}

func startRestartProducer(t *testing.T, pool *pgxpool.Pool) *restartProducer {
	ctx, cancel := context.WithCancel(context.Background())
	p := &restartProducer{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(4 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			rec, n := newRecord(restartChannels[i%len(restartChannels)], i)
			sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
			err := stageTx(sctx, pool, []stage.Notification{n})
			scancel()
			p.mu.Lock()
			if err == nil {
				p.committed[p.phase] = append(p.committed[p.phase], rec.ID)
			} else {
				p.uncertain = append(p.uncertain, rec.ID)
				p.failures++
			}
			p.mu.Unlock()
		}
	}()
	t.Cleanup(p.stop)
	return p
}

// burst stages n records in one transaction, outside the paced loop.
func (p *restartProducer) burst(ctx context.Context, pool *pgxpool.Pool, n int) error {
	ids := make([]string, 0, n)
	ns := make([]stage.Notification, 0, n)
	for i := range n {
		rec, note := newRecord(restartChannels[i%len(restartChannels)], 1_000_000+i)
		ids, ns = append(ids, rec.ID), append(ns, note)
	}
	if err := stageTx(ctx, pool, ns); err != nil {
		return err
	}
	p.mu.Lock()
	p.committed[p.phase] = append(p.committed[p.phase], ids...)
	p.mu.Unlock()
	return nil
}

// stop ends the producer and waits for it.
func (p *restartProducer) stop() {
	p.cancel()
	<-p.done
}

func (p *restartProducer) setPhase(ph int) {
	p.mu.Lock()
	p.phase = ph
	p.mu.Unlock()
}

// counts returns the commits of phase ph and the failures so far.
func (p *restartProducer) counts(ph int) (committed, failures int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.committed[ph]), p.failures
}

// TestPostgresRestartDuringDispatch stops a private PostgreSQL cluster
// under a running `herald serve` while records are being staged and
// dispatched, starts it again, and checks that /readyz is 503 during the
// outage and 200 after it without restarting Herald, and that every
// record committed before the stop or after the start ends dispatched and
// is delivered to an open SSE stream.
func TestPostgresRestartDuringDispatch(t *testing.T) {
	pg := testenv.StartPrivatePG(t)
	secret := "crashtest-secret-of-32-bytes-" + testenv.Suffix()
	dataDir := t.TempDir()
	srv := startHerald(t, "serve", "serve", "--database-url", pg.URL(), "--listen", "127.0.0.1:0",
		"--jwt-hmac-secret", secret, "--data-dir", dataDir,
		"--outbox-poll-interval", "100ms", "--outbox-lease", restartLease, "--outbox-batch-size", strconv.Itoa(restartBatch), "--outbox-lanes", strconv.Itoa(restartLanes),
		"--queue-max-messages", "100000", "--queue-max-bytes", "67108864")
	base := "http://" + srv.waitStdout(t, serveBanner, 30*time.Second)[1]
	token := strings.TrimSpace(runHerald(t, 30*time.Second, "token", "--jwt-hmac-secret", secret,
		"--tenant", testTenant, "--sub", "crashtest", "--subscribe", "feed/*", "--ttl", "10m"))

	waitReadyz(t, base, http.StatusOK, 15*time.Second)
	sse := openSSE(t, base, token, restartChannels)
	waitUntil(t, 10*time.Second, 10*time.Millisecond, "the SSE stream's subscribed events", func() (bool, error) {
		sub, _, _, ended := sse.state()
		if ended != nil {
			t.Fatalf("sse stream ended: %v", ended)
		}
		return sub == len(restartChannels), fmt.Errorf("%d subscribed", sub)
	})

	pool := openPool(t, pg.URL(), 4)
	prod := startRestartProducer(t, pool)
	waitUntil(t, 30*time.Second, 10*time.Millisecond, "deliveries before the stop", func() (bool, error) {
		_, _, distinct, _ := sse.state()
		return distinct >= 100, fmt.Errorf("%d delivered", distinct)
	})

	// A burst gives the Worker a backlog, so the stop lands mid-dispatch.
	bctx, bcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer bcancel()
	if err := prod.burst(bctx, pool, restartBurst); err != nil {
		t.Fatalf("burst: %v", err)
	}
	_, _, before, _ := sse.state()
	waitUntil(t, 30*time.Second, 2*time.Millisecond, "the burst's dispatch to begin", func() (bool, error) {
		_, _, distinct, _ := sse.state()
		return distinct >= before+restartBurst/10, fmt.Errorf("%d delivered", distinct)
	})

	prod.setPhase(phaseDown)
	stopped := time.Now()
	if err := pg.Stop("fast"); err != nil {
		t.Fatal(err)
	}
	_, _, atStop, _ := sse.state()
	t.Logf("PostgreSQL stopped (fast) %v after the stop began, with %d records delivered so far, the burst of %d in dispatch",
		time.Since(stopped).Round(time.Millisecond), atStop, restartBurst)
	waitReadyz(t, base, http.StatusServiceUnavailable, 15*time.Second)
	t.Logf("/readyz turned 503 %v after the stop began", time.Since(stopped).Round(time.Millisecond))
	_, failuresAtStop := prod.counts(phaseDown)
	waitUntil(t, 10*time.Second, 10*time.Millisecond, "an outage of 2s with producers failing", func() (bool, error) {
		_, f := prod.counts(phaseDown)
		return f >= failuresAtStop+50 && time.Since(stopped) >= 2*time.Second, nil
	})
	if code, err := httpStatus(base + "/readyz"); err != nil || code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz during the outage: %d %v, want 503", code, err)
	}
	_, _, duringOutage, _ := sse.state()
	// What reaches the SSE client meanwhile is what the Worker had
	// published before the stop and the batches its lanes held; on a busy
	// machine the stream lags the broker, so this is reported, not bounded.
	t.Logf("%d records delivered while PostgreSQL was down (the Worker's %d lanes held batches of up to %d)",
		duringOutage-atStop, restartLanes, restartBatch)

	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	prod.setPhase(phaseAfter)
	t.Logf("PostgreSQL was down for %v", started.Sub(stopped).Round(time.Millisecond))
	var held, pending int
	waitUntil(t, 10*time.Second, 20*time.Millisecond, "the outbox states after the restart", func() (bool, error) {
		qctx, qcancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer qcancel()
		err := pool.QueryRow(qctx, `SELECT count(*) FILTER (WHERE state = 'processing'), count(*) FILTER (WHERE state = 'pending')
			FROM herald.outbox_records`).Scan(&held, &pending)
		return err == nil, err // the pool's first use of a connection from before the restart may fail
	})
	t.Logf("after the restart: %d records processing (claimed before the stop), %d pending", held, pending)
	waitReadyz(t, base, http.StatusOK, 40*time.Second)
	t.Logf("/readyz turned 200 %v after PostgreSQL started", time.Since(started).Round(time.Millisecond))
	waitUntil(t, 20*time.Second, 10*time.Millisecond, "commits after the restart", func() (bool, error) {
		n, _ := prod.counts(phaseAfter)
		return n >= 100, fmt.Errorf("%d committed", n)
	})
	prod.stop()
	if !srv.running() {
		t.Fatalf("herald serve exited: %v", srv.err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	var rows map[string]outboxRow
	waitUntil(t, 40*time.Second, 100*time.Millisecond, "every record dispatched and delivered", func() (bool, error) {
		var err error
		rows, err = readOutbox(ctx, pool)
		if err != nil {
			return false, err
		}
		undispatched, undelivered := 0, 0
		for id, r := range rows {
			if r.state == "dead_letter" {
				t.Fatalf("record %s dead-lettered: %s", id, r.lastError)
			}
			if r.state != "dispatched" {
				undispatched++
			}
			if sse.delivered(id) == 0 {
				undelivered++
			}
		}
		if _, _, _, ended := sse.state(); ended != nil {
			t.Fatalf("sse stream ended: %v", ended)
		}
		return undispatched == 0 && undelivered == 0,
			fmt.Errorf("%d of %d rows not dispatched, %d not delivered", undispatched, len(rows), undelivered)
	})

	prod.mu.Lock()
	defer prod.mu.Unlock()
	if len(prod.committed[phaseBefore]) == 0 || len(prod.committed[phaseAfter]) == 0 {
		t.Fatalf("commits before the stop %d, after the start %d: want both", len(prod.committed[phaseBefore]), len(prod.committed[phaseAfter]))
	}
	for ph, ids := range prod.committed {
		for _, id := range ids {
			r, ok := rows[id]
			if !ok {
				t.Fatalf("record %s committed (phase %d) is not in herald.outbox", id, ph)
			}
			if !r.hasDispatchedAt {
				t.Fatalf("record %s is dispatched without dispatched_at", id)
			}
		}
	}
	landed := 0
	for _, id := range prod.uncertain {
		if _, ok := rows[id]; ok {
			landed++
		}
	}
	_, events, distinct, _ := sse.state()
	t.Logf("committed %d before the stop, %d while it stopped, %d after the start; %d failed transactions (%d of them committed anyway); "+
		"%d records dispatched, %d delivered over SSE (%d duplicates); Herald not restarted",
		len(prod.committed[phaseBefore]), len(prod.committed[phaseDown]), len(prod.committed[phaseAfter]),
		len(prod.uncertain), landed, len(rows), distinct, events-distinct)
}

// Settings of the restart test's Herald and load.
const (
	restartLease = "5s" // --outbox-lease
	restartBatch = 100  // --outbox-batch-size
	restartLanes = 4    // --outbox-lanes (the default)
	restartBurst = 3_000
)

// waitReadyz waits until GET /readyz answers want.
func waitReadyz(t *testing.T, base string, want int, timeout time.Duration) {
	t.Helper()
	waitUntil(t, timeout, 50*time.Millisecond, fmt.Sprintf("/readyz %d", want), func() (bool, error) {
		code, err := httpStatus(base + "/readyz")
		if err != nil {
			return false, err
		}
		return code == want, fmt.Errorf("/readyz %d", code)
	})
}

// outboxRow is what the restart test reads back of one record.
type outboxRow struct {
	state           string
	hasDispatchedAt bool
	lastError       string
}

func readOutbox(ctx context.Context, pool *pgxpool.Pool) (map[string]outboxRow, error) {
	rows, err := pool.Query(ctx, `SELECT id::text, state, dispatched_at IS NOT NULL, coalesce(last_error, '') FROM herald.outbox_records`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]outboxRow{}
	for rows.Next() {
		var id string
		var r outboxRow
		if err := rows.Scan(&id, &r.state, &r.hasDispatchedAt, &r.lastError); err != nil {
			return nil, err
		}
		out[id] = r
	}
	return out, rows.Err()
}

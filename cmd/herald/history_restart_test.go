package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/internal/testclient"
	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed/outboxdb"
	"github.com/heraldgw/herald/outboxfeed/stage"
)

// restartScale is the restart test's size: the 500 SSE and 500 WebSocket
// clients on 50 channels the issue asks for (20–30 s a run on 2 cores
// with the race detector). HERALD_RESTART_QUICK=1 runs 100 + 100 clients
// on 20 channels (about 5 s), for a quick loop while working on it.
type restartScale struct{ sse, ws, channels, perClient int }

func restartSize() restartScale {
	if os.Getenv("HERALD_RESTART_QUICK") != "" {
		return restartScale{sse: 100, ws: 100, channels: 20, perClient: 3}
	}
	return restartScale{sse: 500, ws: 500, channels: 50, perClient: 3}
}

// batchStager stages notifications, each batch in one producer
// transaction, and remembers per channel what it staged, in order.
type batchStager struct {
	t     *testing.T
	stage func(ctx context.Context, ns []stage.Notification) ([]string, error)
	close func()

	roundMu sync.Mutex // one transaction at a time on the one connection
	n       int

	mu     sync.Mutex
	staged map[string][]string // channel → record ids, in staging order
}

func newBatchStager(t *testing.T, dbURL string) *batchStager {
	t.Helper()
	s := &batchStager{t: t, staged: make(map[string][]string)}
	if outboxdb.IsPostgresURL(dbURL) {
		conn, err := pgx.Connect(context.Background(), dbURL)
		if err != nil {
			t.Fatal(err)
		}
		s.close = func() { _ = conn.Close(context.Background()) }
		s.stage = func(ctx context.Context, ns []stage.Notification) ([]string, error) {
			tx, err := conn.Begin(ctx)
			if err != nil {
				return nil, err
			}
			defer tx.Rollback(ctx) //nolint:errcheck // after Commit it does nothing
			var ids []string
			for _, n := range ns {
				id, err := stage.Stage(ctx, tx, n)
				if err != nil {
					return nil, err
				}
				ids = append(ids, id)
			}
			return ids, tx.Commit(ctx)
		}
	} else {
		db, err := sql.Open("sqlite", "file:"+dbURL+"?_pragma=busy_timeout(5000)&_txlock=immediate")
		if err != nil {
			t.Fatal(err)
		}
		s.close = func() { _ = db.Close() }
		s.stage = func(ctx context.Context, ns []stage.Notification) ([]string, error) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return nil, err
			}
			defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
			var ids []string
			for _, n := range ns {
				id, err := stage.StageSQL(ctx, tx, stage.SQLite, n)
				if err != nil {
					return nil, err
				}
				ids = append(ids, id)
			}
			return ids, tx.Commit()
		}
	}
	t.Cleanup(s.close)
	return s
}

// round stages one record on each of channels, in one transaction.
func (s *batchStager) round(channels []string) error {
	s.roundMu.Lock()
	defer s.roundMu.Unlock()
	var ns []stage.Notification
	for _, ch := range channels {
		s.n++
		ns = append(ns, notification("acme", ch, fmt.Sprintf(`{"n":%d}`, s.n)))
	}
	ids, err := s.stage(context.Background(), ns)
	if err != nil {
		return err
	}
	s.mu.Lock()
	for i, ch := range channels {
		s.staged[ch] = append(s.staged[ch], ids[i])
	}
	s.mu.Unlock()
	return nil
}

func (s *batchStager) snapshot(ch string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.staged[ch]...)
}

// received is what one client got on one channel.
type received struct {
	ids     []string
	offsets []uint64
	epochs  []string
	// subscribed holds each subscription's answer: recovered, and why not.
	subscribed []string
}

// restartClient is one SSE or WebSocket client with positions on its
// channels, reconnecting with them after the node restarts.
type restartClient struct {
	name     string
	ws       bool
	channels []string
	token    string

	mu     sync.Mutex
	got    map[string]*received
	cursor string // SSE: the last id: seen
	total  int    // publications received
	ended  chan struct{}
}

// progress wakes whoever waits on the clients' progress.
type progress struct{ ch chan struct{} }

func (p progress) wake() {
	select {
	case p.ch <- struct{}{}:
	default:
	}
}

// waitFor waits until cond holds, woken by the clients' progress.
func (p progress) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(time.Minute) // a failure bound, not a budget
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond) // the stager's progress wakes no one
	defer tick.Stop()
	for !cond() {
		select {
		case <-p.ch:
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (c *restartClient) channel(ch string) *received {
	r := c.got[ch]
	if r == nil {
		r = &received{}
		c.got[ch] = r
	}
	return r
}

func (c *restartClient) publication(ch, id string, offset uint64, epoch string) {
	c.mu.Lock()
	r := c.channel(ch)
	r.ids = append(r.ids, id)
	r.offsets = append(r.offsets, offset)
	r.epochs = append(r.epochs, epoch)
	c.total++
	c.mu.Unlock()
}

// subscribeResult is the answer to a subscription, on either transport.
type subscribeResult struct {
	Channel   string `json:"channel"`
	Recovered bool   `json:"recovered"`
	Reason    string `json:"reason"`
	Offset    uint64 `json:"offset"`
	Epoch     string `json:"epoch"`
}

func (c *restartClient) subscribed(res subscribeResult) {
	c.mu.Lock()
	r := c.channel(res.Channel)
	answer := "recovered"
	if !res.Recovered {
		answer = "not recovered: " + res.Reason
	}
	r.subscribed = append(r.subscribed, answer)
	c.mu.Unlock()
}

// position is where the client stands on ch: its last publication, or
// the subscription's position when it got none.
func (c *restartClient) position(ch string) (fanout.Position, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.got[ch]
	if r == nil || len(r.offsets) == 0 {
		return fanout.Position{}, false
	}
	return fanout.Position{Offset: r.offsets[len(r.offsets)-1], Epoch: r.epochs[len(r.epochs)-1]}, true
}

// connect opens the client's stream on base, resuming from its positions
// (SSE: its cursor), and reads it until the server ends it.
func (c *restartClient) connect(t *testing.T, base string, p progress) {
	t.Helper()
	c.ended = make(chan struct{})
	if c.ws {
		c.connectWS(t, base, p)
	} else {
		c.connectSSE(t, base, p)
	}
}

func (c *restartClient) connectSSE(t *testing.T, base string, p progress) {
	t.Helper()
	q := make([]string, len(c.channels))
	for i, ch := range c.channels {
		q[i] = "channel=" + ch
	}
	req, err := http.NewRequest(http.MethodGet, base+"/v1/sse?"+strings.Join(q, "&"), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	c.mu.Lock()
	if c.cursor != "" {
		req.Header.Set("Last-Event-ID", c.cursor)
	}
	c.mu.Unlock()
	sse, err := testclient.OpenSSE(nil, req, testclient.SSEOptions{})
	if err != nil {
		t.Fatalf("%s: open SSE: %v", c.name, err)
	}
	t.Cleanup(sse.Close)
	go func() {
		defer close(c.ended)
		for ev := range sse.Events() {
			switch {
			case ev.Name == "subscribed":
				var res subscribeResult
				if err := json.Unmarshal([]byte(ev.Data), &res); err != nil {
					t.Errorf("%s: subscribed event %q: %v", c.name, ev.Data, err)
				}
				c.subscribed(res)
			case ev.Name == "" && ev.Data != "":
				e, err := fanout.DecodeEnvelope([]byte(ev.Data))
				if err != nil {
					t.Errorf("%s: publication %q: %v", c.name, ev.Data, err)
					continue
				}
				c.publication(e.Key.Channel, e.ID, e.Offset, e.Epoch)
			}
			if ev.HasID {
				c.mu.Lock()
				c.cursor = ev.ID
				c.mu.Unlock()
			}
			p.wake()
		}
	}()
}

// wsFrame is the part of a herald.v1 frame the test reads.
type wsFrame struct {
	Push    string           `json:"push"`
	ID      json.RawMessage  `json:"id"`
	Channel string           `json:"channel"`
	Offset  uint64           `json:"offset"`
	Epoch   string           `json:"epoch"`
	Result  *subscribeResult `json:"result"`
	Error   json.RawMessage  `json:"error"`
}

func (c *restartClient) connectWS(t *testing.T, base string, p progress) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, _, err := testclient.DialWS(ctx, "ws"+strings.TrimPrefix(base, "http")+"/v1/ws",
		testclient.WSOptions{AnswerPings: true, Buffer: 4096}, func(b []byte) []byte { return append([]byte(nil), b...) })
	if err != nil {
		t.Fatalf("%s: dial: %v", c.name, err)
	}
	t.Cleanup(ws.Close)
	send := func(v any) {
		b, _ := json.Marshal(v)
		if err := ws.Send(b); err != nil {
			t.Errorf("%s: send: %v", c.name, err)
		}
	}
	send(map[string]any{"id": 1, "op": "connect", "token": c.token})
	for i, ch := range c.channels {
		sub := map[string]any{"id": i + 2, "op": "subscribe", "channel": ch}
		if pos, ok := c.position(ch); ok {
			sub["since"] = map[string]any{"offset": pos.Offset, "epoch": pos.Epoch}
		}
		send(sub)
	}
	go func() {
		defer close(c.ended)
		for b := range ws.Frames() {
			var f wsFrame
			if err := json.Unmarshal(b, &f); err != nil {
				t.Errorf("%s: frame %q: %v", c.name, b, err)
				continue
			}
			switch {
			case f.Error != nil:
				t.Errorf("%s: error reply %s", c.name, b)
			case f.Push == "pub":
				var id string
				if err := json.Unmarshal(f.ID, &id); err != nil {
					t.Errorf("%s: publication id in %s: %v", c.name, b, err)
				}
				c.publication(f.Channel, id, f.Offset, f.Epoch)
			case f.Result != nil && f.Result.Channel != "":
				c.subscribed(*f.Result)
			}
			p.wake()
		}
	}()
}

// TestRestartResumesFromHistory, with the real binary on each store and
// the in-memory broker: clients on several channels each, SSE and
// WebSocket, hold positions; the node stops (SIGTERM) while a producer
// keeps staging, more records are staged while it is down, and it starts
// again on the same data directory. Every client resumes every channel
// with recovered: true, and gets every record once, in staging order,
// with one epoch and consecutive offsets across the restart.
//
// Killed (SIGKILL) instead, the history survives too (the machine did
// not restart): every resume is recovered. A record the broker accepted
// whose completion the kill lost is published again with a new offset
// (at-least-once, docs/delivery.md), so there a record may come twice;
// none is missing or out of order, offsets stay consecutive.
func TestRestartResumesFromHistory(t *testing.T) {
	bin := buildHerald(t)
	for _, sc := range storeCases() {
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
			t.Run(sc.name+"/"+strings.ToLower(unix.SignalName(sig)), func(t *testing.T) {
				dbURL, _ := sc.setup(t)
				testRestartResumes(t, bin, dbURL, sig)
			})
		}
	}
}

func testRestartResumes(t *testing.T, bin, dbURL string, sig syscall.Signal) {
	pg := outboxdb.IsPostgresURL(dbURL)
	data := filepath.Dir(dbURL) // the SQLite file's directory
	if pg {
		data = t.TempDir()
	}
	args := []string{"serve", "--listen", "127.0.0.1:0", "--jwt-hmac-secret", testSecret, "--log-level", "warn",
		"--data-dir", data, "--outbox-poll-interval", "50ms", "--connect-attempts-per-ip", "-1",
		// A stopped Worker's partition lease on SQLite is waited out by
		// the next one (30 s by default): records staged around the stop
		// arrive that much later. Shortened, so the test stays short.
		"--outbox-lease", "3s"}
	if pg {
		args = append(args, "--database-url", dbURL)
	}
	start := func() (pid int, base string, stderr *testenv.SyncBuffer) {
		_, proc, stderr := startBinary(t, bin, args...)
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("serve stderr:\n%s", stderr.String())
			}
		})
		return proc.pid, mustListen(t, proc), stderr
	}
	began := time.Now()
	phase := func(what string) { t.Logf("%6.2fs %s", time.Since(began).Seconds(), what) }
	pid, base, stderr := start()
	phase("started")

	size := restartSize()
	channels := make([]string, size.channels)
	for i := range channels {
		channels[i] = fmt.Sprintf("rooms/%d", i)
	}
	p := progress{ch: make(chan struct{}, 1)}
	var clients []*restartClient
	for i := range size.sse + size.ws {
		c := &restartClient{name: fmt.Sprintf("client %d", i), ws: i >= size.sse, got: make(map[string]*received)}
		c.token = mint(t, "acme", fmt.Sprintf("u%d", i), "rooms/*")
		for j := range size.perClient {
			c.channels = append(c.channels, channels[(i+j*7)%size.channels])
		}
		c.connect(t, base, p)
		clients = append(clients, c)
	}
	allSubscribed := func(n int) func() bool {
		return func() bool {
			for _, c := range clients {
				c.mu.Lock()
				short := len(c.got) < len(c.channels)
				for _, r := range c.got {
					short = short || len(r.subscribed) < n
				}
				c.mu.Unlock()
				if short {
					return false
				}
			}
			return true
		}
	}
	p.waitFor(t, "every client subscribed", allSubscribed(1))
	phase("subscribed")

	st := newBatchStager(t, dbURL)
	allReceived := func() bool {
		for _, c := range clients {
			for _, ch := range c.channels {
				want := len(st.snapshot(ch))
				c.mu.Lock()
				n := 0
				if r := c.got[ch]; r != nil {
					n = len(r.ids)
				}
				c.mu.Unlock()
				if n < want {
					return false
				}
			}
		}
		return true
	}
	for range 3 {
		if err := st.round(channels); err != nil {
			t.Fatal(err)
		}
	}
	p.waitFor(t, "the first records at every client", allReceived)
	phase("first records received")

	// A producer keeps staging through the stop and the start.
	stop := make(chan struct{})
	stagerDone := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				stagerDone <- nil
				return
			case <-time.After(20 * time.Millisecond): // the producer's pace
			}
			if err := st.round(channels[:size.channels/2]); err != nil {
				stagerDone <- err
				return
			}
		}
	}()
	time.Sleep(200 * time.Millisecond) // records flow while the node stops
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
	phase("stopped")
	if out := stderr.String(); sig == syscall.SIGTERM && strings.Contains(out, "level=ERROR") {
		t.Fatalf("serve logged errors while stopping:\n%s", out)
	}
	for _, c := range clients {
		<-c.ended
	}
	// Records staged while the node is down.
	if err := st.round(channels); err != nil {
		t.Fatal(err)
	}
	_, base, _ = start()
	phase("restarted")
	for _, c := range clients {
		c.connect(t, base, p)
	}
	phase("reconnected")
	p.waitFor(t, "every client resubscribed", allSubscribed(2))
	phase("resubscribed")
	time.Sleep(200 * time.Millisecond) // records flow after the start
	close(stop)
	if err := <-stagerDone; err != nil {
		t.Fatal(err)
	}
	p.waitFor(t, "every record at every client", allReceived)
	phase("all received")

	records, repeats := 0, 0
	for _, ch := range channels {
		records += len(st.snapshot(ch))
	}
	for _, c := range clients {
		c.mu.Lock()
		for _, ch := range c.channels {
			r, want := c.got[ch], st.snapshot(ch)
			if len(r.subscribed) != 2 || r.subscribed[1] != "recovered" {
				t.Fatalf("%s %s: subscriptions %v, want the resume recovered", c.name, ch, r.subscribed)
			}
			ids := r.ids
			if sig == syscall.SIGKILL {
				ids = firstOccurrences(r.ids)
				repeats += len(r.ids) - len(ids)
			}
			if strings.Join(ids, " ") != strings.Join(want, " ") {
				t.Fatalf("%s %s: got %d records %v, want the %d staged, once, in order %v", c.name, ch, len(r.ids), r.ids, len(want), want)
			}
			for i := range r.offsets {
				if r.offsets[i] != uint64(i+1) || r.epochs[i] != r.epochs[0] {
					t.Fatalf("%s %s: publication %d at %d/%s, want %d/%s", c.name, ch, i, r.offsets[i], r.epochs[i], i+1, r.epochs[0])
				}
			}
		}
		c.mu.Unlock()
	}
	t.Logf("%d SSE + %d WebSocket clients on %d channels (%d each): %d records, every resume recovered; %d deliveries of a record published again after the kill",
		size.sse, size.ws, size.channels, size.perClient, records, repeats)
}

// firstOccurrences is ids without the repeats of an id.
func firstOccurrences(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	var out []string
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// TestHistoryDirLock: one node's history log per data directory. A second
// serve on PostgreSQL (which takes no lock on the embedded store) with the
// same --data-dir is refused, naming the first; with --history-log=false
// it starts.
func TestHistoryDirLock(t *testing.T) {
	bin := buildHerald(t)
	dbURL := testenv.DatabaseURL(t)
	data := t.TempDir()
	args := []string{"serve", "--listen", "127.0.0.1:0", "--jwt-hmac-secret", testSecret, "--log-level", "warn",
		"--data-dir", data, "--database-url", dbURL}
	_, first, _ := startBinary(t, bin, args...)
	mustListen(t, first)
	code, _, stderr := runBinary(t, bin, args...)
	if code == 0 || !strings.Contains(stderr, "history directory") || !strings.Contains(stderr, fmt.Sprintf("herald process %d", first.pid)) {
		t.Fatalf("second serve on the data directory: exit %d, stderr %q; want refused naming process %d", code, stderr, first.pid)
	}
	_, second, _ := startBinary(t, bin, append(args, "--history-log=false")...)
	mustListen(t, second)
}

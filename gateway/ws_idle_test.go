package gateway

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/fanout/fanouttest"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/subscriptions"
)

// These tests drive a whole server: what an idle connection costs is
// measured on the server as a deployment runs it, handler, registration
// and metrics included, with the clients in a process of their own.

// idleClientsEnv, when set in a test binary's environment, makes it the
// client process of an idle-memory measurement: "<ws url> <n> <token>".
// The clients live in their own process so the server's memory is
// measured alone.
const idleClientsEnv = "HERALD_TEST_IDLE_CLIENTS"

// runIdleClients opens n connections (WebSocket for a ws:// url, SSE
// streams for http://), connects each and subscribes it to one of ten
// channels, prints "ready", and keeps them open until its standard input
// closes.
func runIdleClients(spec string) int {
	parts := strings.Fields(spec)
	if len(parts) != 3 {
		fmt.Fprintf(os.Stderr, "%s: want \"<url> <n> <token>\", got %q\n", idleClientsEnv, spec)
		return 2
	}
	n, err := strconv.Atoi(parts[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	conns := make([]io.Closer, 0, n)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	open := func(i int) (io.Closer, error) {
		c, err := openIdleClient(hc, parts[0], parts[2], i)
		if err != nil {
			return nil, err
		}
		return closeNow{c}, nil
	}
	if strings.HasPrefix(parts[0], "http://") {
		open = func(i int) (io.Closer, error) { return openIdleStream(parts[0], parts[2], i) }
	}
	for i := range n {
		c, err := open(i)
		if err != nil {
			fmt.Fprintf(os.Stderr, "client %d: %v\n", i, err)
			return 1
		}
		conns = append(conns, c)
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// closeNow closes a WebSocket without a close handshake.
type closeNow struct{ c *websocket.Conn }

func (c closeNow) Close() error { return c.c.CloseNow() }

func openIdleClient(hc *http.Client, url, token string, i int) (*websocket.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: []string{ws.Protocol}, HTTPClient: hc})
	if err != nil {
		return nil, err
	}
	msg := fmt.Sprintf(`{"id":1,"op":"connect","token":%q}`, token)
	if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		return nil, err
	}
	msg = fmt.Sprintf(`{"id":2,"op":"subscribe","channel":"orders/%d"}`, i%10)
	if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		return nil, err
	}
	for replies := 0; replies < 2; {
		_, b, err := c.Read(ctx)
		if err != nil {
			return nil, err
		}
		for line := range bytes.SplitSeq(b, []byte{'\n'}) {
			if !bytes.Contains(line, []byte(`"result"`)) {
				return nil, fmt.Errorf("unexpected frame %s", line)
			}
			replies++
		}
	}
	return c, nil
}

// idleMeasure is the server-side cost of one idle connection.
type idleMeasure struct {
	bytesPerConn      float64 // live heap + goroutine stacks
	heapPerConn       float64
	stackPerConn      float64
	goroutinesPerConn float64
}

// memInUse is the live heap and the goroutine stacks after a full
// collection (which also shrinks stacks mostly unused).
func memInUse() (heap, stacks uint64) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc, m.StackInuse
}

// measureIdle runs a gateway, has a child process open n idle connected
// and subscribed connections of transport to it, and measures what they
// cost the server.
func measureIdle(tb testing.TB, transport string, n int) idleMeasure {
	tb.Helper()
	broker, err := fanout.NewMemoryBroker(fanout.MemoryConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	hub := fanouttest.StartHub(tb, broker, fanout.HubConfig{})
	srv, err := New(Config{
		Listen: "127.0.0.1:0", ConnectAttemptsPerIP: -1, HeartbeatInterval: time.Hour, ClientTimeout: 2 * time.Hour,
		MaxConnectionsPerUser: -1,
	}, Deps{
		Verifier: auth.NewHMACVerifier(testSecret, 0), Authorizer: &subscriptions.Authorizer{},
		Broker: broker, Hub: hub, Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		tb.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	defer srv.Stop()
	tok, err := mintClaims("u1", "acme", time.Now().Add(time.Hour), []string{"orders/*"}, nil, "")
	if err != nil {
		tb.Fatal(err)
	}

	heapBefore, stackBefore := memInUse()

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	url := "ws://" + srv.Addr() + "/v1/ws"
	if transport == transportSSE {
		url = "http://" + srv.Addr() + "/v1/sse"
	}
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %s", idleClientsEnv, url, n, tok))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	defer func() {
		_ = stdin.Close()
		if err := cmd.Wait(); err != nil {
			tb.Errorf("client process: %v", err)
		}
	}()
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- line
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case line := <-ready:
		if strings.TrimSpace(line) != "ready" {
			tb.Fatalf("client process said %q", line)
		}
	case <-time.After(2 * time.Minute):
		tb.Fatal("client process not ready after 2 minutes")
	}
	gauge := srv.metrics.connections.WithLabelValues(transport)
	var readers, writers, netHTTP int
	wantReaders := n // an idle WebSocket parks where it can: no reader
	if transport == transportWS {
		wantReaders = n * ws.IdleGoroutines()
	}
	eventually(tb, time.Minute, "every connection to be open and every writer gone", func() bool {
		readers, writers, netHTTP = connGoroutines(transport)
		return gaugeValue(gauge) == float64(n) && writers == 0 && (readers == wantReaders || readers == 0 && netHTTP >= n) &&
			stackCount("session.(*WriterPool).work(") == 0
	})
	heapAfter, stackAfter := memInUse()
	m := idleMeasure{
		heapPerConn:       (float64(heapAfter) - float64(heapBefore)) / float64(n),
		stackPerConn:      (float64(stackAfter) - float64(stackBefore)) / float64(n),
		goroutinesPerConn: float64(readers+writers+netHTTP) / float64(n),
	}
	m.bytesPerConn = m.heapPerConn + m.stackPerConn
	return m
}

// wsGoroutines counts the goroutines running WebSocket readers and
// writers.
func wsGoroutines() (readers, writers int) {
	readers, writers, _ = connGoroutines(transportWS)
	return readers, writers
}

// stacks returns the stacks of every goroutine, separated by blank lines.
func stacks() []byte {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return buf[:n]
		}
		buf = make([]byte, 2*len(buf))
	}
}

// stackCount counts the goroutines whose stack holds frame.
func stackCount(frame string) int {
	n := 0
	for g := range bytes.SplitSeq(stacks(), []byte("\n\n")) {
		if bytes.Contains(g, []byte(frame)) {
			n++
		}
	}
	return n
}

// connGoroutines counts the goroutines running the readers of
// transport's connections, the connections' writers (the core's, shared
// by every transport) and those net/http runs for a connection it still
// serves (the handler's, the background reader's).
func connGoroutines(transport string) (readers, writers, netHTTP int) {
	buf := stacks()
	run := "internal/ws.(*Conn).run("
	if transport == transportSSE {
		run = "internal/sse.(*Stream).Wait("
	}
	for g := range bytes.SplitSeq(buf, []byte("\n\n")) {
		switch {
		case bytes.Contains(g, []byte("session.(*Conn).writeLoop(")):
			writers++
		case bytes.Contains(g, []byte(run)):
			readers++
		case bytes.Contains(g, []byte("net/http.(*conn).serve(")),
			bytes.Contains(g, []byte("net/http.(*connReader).backgroundRead(")):
			netHTTP++
		}
	}
	return readers, writers, netHTTP
}

func gaugeValue(g prometheus.Gauge) float64 {
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		return -1
	}
	return m.GetGauge().GetValue()
}

// TestWSIdleConnectionCost: an idle connected and subscribed WebSocket
// costs the server no goroutine on Linux (the reader parks it with the
// shared epoll instance, internal/ws frameWatch.park; elsewhere its reader
// waits, on a 2 KiB stack, internal/ws Conn.apart), no writer while idle,
// and at most 10 KiB: net/http's request and buffers are gone after the
// upgrade, and it keeps no read or write buffer beyond 16 bytes each
// (internal/ws). Under the race detector frames are larger, hence a
// larger bound there.
func TestWSIdleConnectionCost(t *testing.T) {
	checkIdleCost(t, transportWS, 10<<10)
}

// checkIdleCost fails unless 200 idle connections of transport cost one
// goroutine each (an SSE stream's reader; none for a parked WebSocket,
// ws.IdleGoroutines) and at most limit bytes each (8 KiB more under
// -race).
func checkIdleCost(t *testing.T, transport string, limit int) {
	const n = 200
	goroutines := 1
	if transport == transportWS {
		goroutines = ws.IdleGoroutines()
	}
	m := measureIdle(t, transport, n)
	t.Logf("%d idle %s connections: %.0f bytes/conn (heap %.0f + stacks %.0f), %.2f goroutines/conn",
		n, transport, m.bytesPerConn, m.heapPerConn, m.stackPerConn, m.goroutinesPerConn)
	if m.goroutinesPerConn != float64(goroutines) {
		t.Fatalf("%.2f goroutines per idle connection, want %d", m.goroutinesPerConn, goroutines)
	}
	if raceEnabled {
		limit += 8 << 10
	}
	if m.bytesPerConn > float64(limit) {
		t.Fatalf("%.0f bytes per idle connection (heap %.0f + stacks %.0f), bound %d",
			m.bytesPerConn, m.heapPerConn, m.stackPerConn, limit)
	}
}

// BenchmarkIdleConnMemory reports what 1,000 idle WebSocket connections
// cost the server, per connection. Run it with -benchtime 1x.
func BenchmarkIdleConnMemory(b *testing.B) { benchIdle(b, transportWS) }

// benchIdle reports what 1,000 idle connections of transport cost the
// server, per connection.
func benchIdle(b *testing.B, transport string) {
	var m idleMeasure
	for range b.N {
		m = measureIdle(b, transport, 1000)
	}
	b.ReportMetric(m.bytesPerConn/1024, "KiB/conn")
	b.ReportMetric(m.bytesPerConn, "bytes/conn")
	b.ReportMetric(m.heapPerConn, "heap-bytes/conn")
	b.ReportMetric(m.stackPerConn, "stack-bytes/conn")
	b.ReportMetric(m.goroutinesPerConn, "goroutines/conn")
}

package gateway

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestSlowClientIsDisconnected: a client that stops reading falls behind
// its bounded queue and then behind the channel history (10 publications)
// while a healthy subscriber of the same channel receives every
// publication. When the stalled client reads again it gets an unbroken
// prefix of the channel and then the "slow" disconnect event.
func TestSlowClientIsDisconnected(t *testing.T) {
	e := newEnv(t, envOptions{history: 10, cfg: Config{QueueMaxMessages: 4, QueueMaxBytes: 64 << 10, WriteTimeout: time.Hour}})
	ts := smallBufferServer(t, e)
	tok := e.token("acme", "u1", "orders/*")

	// The stalled client: a raw connection that reads the response head and
	// the subscribed event, then does not read until told to.
	stalled := openStalledAt(t, ts.Listener.Addr().String(), tok, testRecvBuffer)

	healthy := e.stream(tok, "orders/1")
	payload := `"` + strings.Repeat("x", 16<<10) + `"`
	catchUps := e.srv.metrics.catchUps.WithLabelValues("sse")
	published := 0
	for published < 100 || e.counter(catchUps) == 0 {
		if published == 5000 {
			t.Fatalf("the stalled client never fell behind its queue in %d publications", published)
		}
		pub := e.publish("acme", "orders/1", payload)
		published++
		if _, p := healthy.publication(t); p.Offset != pub.Offset {
			t.Fatalf("healthy subscriber got offset %d, want %d", p.Offset, pub.Offset)
		}
	}
	if n := e.counter(e.srv.metrics.queueDropped); n < 1 {
		t.Fatalf("herald_queue_dropped_total = %v", n)
	}
	// It reads again: what the buffers held, in order, then the end.
	var last uint64
	for {
		off, ev := stalled.nextEvent(t)
		if ev == "disconnect" {
			break
		}
		if off != last+1 {
			t.Fatalf("stalled client: offset %d after %d", off, last)
		}
		last = off
	}
	if last >= uint64(published-10) {
		t.Fatalf("the stalled client read up to offset %d of %d: it did not fall behind the history", last, published)
	}
	stalled.waitEnd(t)
	// The healthy subscriber is undisturbed.
	pub := e.publish("acme", "orders/1", `"after"`)
	if _, p := healthy.publication(t); p.Offset != pub.Offset {
		t.Fatalf("healthy subscriber got offset %d, want %d", p.Offset, pub.Offset)
	}
	eventually(t, 5*time.Second, "the slow disconnect to be counted", func() bool {
		return e.counter(e.srv.metrics.disconnects.WithLabelValues("sse", "slow")) == 1
	})
	t.Logf("stalled client read %d of %d publications of 16 KiB, then was disconnected as slow", last, published)
}

// stalledClient is an SSE client on a raw connection that reads the
// response head and the subscribed event, then stops reading.
type stalledClient struct {
	conn net.Conn
	body io.ReadCloser
	br   *bufio.Reader // body, past the subscribed event
}

func openStalled(t *testing.T, e *testEnv, tok string) *stalledClient {
	t.Helper()
	return openStalledAt(t, e.srv.Addr(), tok, 0)
}

// openStalledAt opens the stalled client on the server at addr, with a
// socket receive buffer of recvBuffer bytes (0: the system's).
func openStalledAt(t *testing.T, addr, tok string, recvBuffer int) *stalledClient {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if tc, ok := conn.(*net.TCPConn); ok && recvBuffer > 0 {
		_ = tc.SetReadBuffer(recvBuffer)
	}
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/v1/sse?channel=orders/1", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 512), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stalled client's status: %d", resp.StatusCode)
	}
	br := bufio.NewReaderSize(resp.Body, 512)
	for subscribed := false; ; {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream head: %v", err)
		}
		subscribed = subscribed || strings.HasPrefix(line, "event: subscribed")
		if subscribed && line == "\n" {
			break
		}
	}
	_ = conn.SetReadDeadline(time.Time{})
	return &stalledClient{conn: conn, body: resp.Body, br: br}
}

// waitEnd reads the rest of the response and fails unless the server ends
// it (a terminated chunked body, or a closed connection) within 10s.
func (c *stalledClient) waitEnd(t *testing.T) {
	t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, c.body); err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("the server did not end the stalled stream: %v", err)
	}
}

// TestStopDoesNotWaitForStalledClients: a client that stopped reading
// cannot hold up a graceful stop beyond ShutdownTimeout.
func TestStopDoesNotWaitForStalledClients(t *testing.T) {
	e := newEnv(t, envOptions{history: 10, cfg: Config{
		QueueMaxBytes: 64 << 20, QueueMaxMessages: 100000, ShutdownTimeout: 300 * time.Millisecond,
	}})
	tok := e.token("acme", "u1", "orders/*")
	stalled := openStalled(t, e, tok)

	payload := `"` + strings.Repeat("x", 64<<10) + `"`
	for range 200 { // ~13 MB: more than the socket buffers hold
		e.publish("acme", "orders/1", payload)
	}
	start := time.Now()
	e.srv.Stop()
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Stop took %s with a stalled client", d)
	}
	stalled.waitEnd(t)
}

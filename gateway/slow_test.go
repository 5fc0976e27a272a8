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

// TestSlowClientIsDisconnected: a client that stops reading overflows its
// bounded queue and is closed as "slow", while a healthy subscriber of the
// same channel receives every publication.
func TestSlowClientIsDisconnected(t *testing.T) {
	e := newEnv(t, envOptions{history: 10, cfg: Config{QueueMaxMessages: 4, QueueMaxBytes: 64 << 10}})
	tok := e.token("acme", "u1", "orders/*")

	// The stalled client: a raw connection that reads the response head and
	// the subscribed event, then never reads again.
	stalled := openStalled(t, e, tok)

	healthy := e.stream(tok, "orders/1")
	slow := e.srv.metrics.disconnects.WithLabelValues("sse", "slow")
	payload := `"` + strings.Repeat("x", 16<<10) + `"`
	published := 0
	for e.counter(slow) == 0 {
		if published == 5000 {
			t.Fatalf("the stalled client was not disconnected after %d publications", published)
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
	// The server ended the stalled stream: reading drains what the buffers
	// held and then ends.
	stalled.waitEnd(t)
	// The healthy subscriber is undisturbed.
	pub := e.publish("acme", "orders/1", `"after"`)
	if _, p := healthy.publication(t); p.Offset != pub.Offset {
		t.Fatalf("healthy subscriber got offset %d, want %d", p.Offset, pub.Offset)
	}
	if n := e.counter(slow); n != 1 {
		t.Fatalf("herald_disconnects_total{sse,slow} = %v, want 1", n)
	}
	t.Logf("stalled client disconnected after %d publications of 16 KiB", published)
}

// stalledClient is an SSE client on a raw connection that reads the
// response head and the subscribed event, then stops reading.
type stalledClient struct {
	conn net.Conn
	body io.ReadCloser
}

func openStalled(t *testing.T, e *testEnv, tok string) *stalledClient {
	t.Helper()
	conn, err := net.DialTimeout("tcp", e.srv.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	req, err := http.NewRequest(http.MethodGet, "http://"+e.srv.Addr()+"/v1/sse?channel=orders/1", nil)
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
	return &stalledClient{conn: conn, body: resp.Body}
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

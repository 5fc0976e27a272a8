package gateway

import (
	"bufio"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"
)

// This test drives a whole server: see ws_idle_test.go.

// openIdleStream opens an SSE stream of channel orders/<i%10> on a raw
// connection, reads its head up to the subscribed event and returns the
// connection, which nothing reads after.
func openIdleStream(rawURL, token string, i int) (net.Conn, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	conn, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
	if err != nil {
		return nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = fmt.Fprintf(conn, "GET %s?channel=orders/%d HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nAccept: text/event-stream\r\n\r\n",
		u.Path, i%10, u.Host, token)
	if err != nil {
		conn.Close()
		return nil, err
	}
	br := bufio.NewReaderSize(conn, 512)
	status, err := br.ReadString('\n')
	if err == nil && !strings.Contains(status, " 200 ") {
		err = fmt.Errorf("status %q", strings.TrimSpace(status))
	}
	for subscribed := false; err == nil; {
		var line string
		line, err = br.ReadString('\n')
		subscribed = subscribed || strings.HasPrefix(line, "event: subscribed")
		if subscribed && line == "\n" {
			break
		}
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, nil
}

// TestSSEIdleStreamCost: an idle HTTP/1.1 SSE stream costs the server one
// goroutine (its reader; no writer while idle, nothing of net/http's) and
// no more than an idle WebSocket (TestWSIdleConnectionCost): after the
// head of the stream the connection leaves net/http, whose handler,
// background reader, request and buffers would otherwise stay.
func TestSSEIdleStreamCost(t *testing.T) {
	checkIdleCost(t, transportSSE, 12<<10)
}

// BenchmarkIdleSSEMemory reports what 1,000 idle SSE streams cost the
// server, per stream. Run it with -benchtime 1x.
func BenchmarkIdleSSEMemory(b *testing.B) { benchIdle(b, transportSSE) }

package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/gateway/internal/ws"
)

// BenchmarkDelivery measures the delivery path to one subscriber over
// loopback, per publication: the broker's publish, the hub's enqueue, the
// connection's writer (its rounds, the sink's framing, the writes) and the
// client's read. Publications are small and flow without pause, so the
// writer batches them as a busy stream does.
func BenchmarkDelivery(b *testing.B) {
	for _, transport := range []string{transportSSE, transportWS} {
		b.Run(transport, func(b *testing.B) { benchDelivery(b, transport) })
	}
}

func benchDelivery(b *testing.B, transport string) {
	e := startTestServer(b, envOptions{history: 1 << 20, cfg: Config{
		QueueMaxMessages: 1 << 20, QueueMaxBytes: 1 << 30, HeartbeatInterval: time.Hour, ClientTimeout: 2 * time.Hour,
	}})
	tok, err := auth.MintHS256(testSecret, auth.Claims{
		Subject: "u1", Tenant: "acme", Subscribe: []string{"orders/*"}, Publish: []string{"orders/*"},
		ExpiresAt: time.Now().Add(time.Hour),
	})
	if err != nil {
		b.Fatal(err)
	}
	var count func(want int64) error
	switch transport {
	case transportSSE:
		count = benchSSEReader(b, e.srv.Addr(), tok)
	case transportWS:
		count = benchWSReader(b, e.srv.Addr(), tok)
	}
	read := make(chan error, 1)
	b.ReportAllocs()
	b.ResetTimer()
	go func() { read <- count(int64(b.N)) }()
	for i := range b.N {
		_, err := e.broker.Publish(context.Background(), fanout.Message{
			ID: fmt.Sprintf("m-%d", i), Key: fanout.Key{Tenant: "acme", Channel: "orders/1"},
			Type: "order.updated", SchemaVersion: 1, Data: json.RawMessage(`{"order_id":"ord_8f2c1a","status":"shipped"}`),
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	if err := <-read; err != nil {
		b.Fatal(err)
	}
}

// benchSSEReader opens an SSE stream of orders/1 on a raw connection and
// returns a function that reads it until want publications came.
func benchSSEReader(b *testing.B, addr, tok string) func(want int64) error {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	_, err = fmt.Fprintf(conn, "GET /v1/sse?channel=orders/1 HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nAccept: text/event-stream\r\n\r\n", addr, tok)
	if err != nil {
		b.Fatal(err)
	}
	br := bufio.NewReaderSize(conn, 64<<10)
	for subscribed := false; ; { // the head, up to the subscribed event
		line, err := br.ReadString('\n')
		if err != nil {
			b.Fatal(err)
		}
		subscribed = subscribed || strings.HasPrefix(line, "event: subscribed")
		if subscribed && line == "\n" {
			break
		}
	}
	return func(want int64) error {
		var n int64
		event := false
		for n < want {
			line, err := br.ReadSlice('\n')
			if err != nil {
				return fmt.Errorf("after %d publications: %w", n, err)
			}
			switch {
			case bytes.HasPrefix(line, []byte("event: ")):
				event = true
			case bytes.HasPrefix(line, []byte("data: ")) && !event:
				n++
			case len(line) == 1:
				event = false
			}
		}
		return nil
	}
}

// benchWSReader connects a WebSocket, subscribes it to orders/1 and
// returns a function that reads it until want publications came.
func benchWSReader(b *testing.B, addr, tok string) func(want int64) error {
	ctx := context.Background()
	ws, _, err := websocket.Dial(ctx, "ws://"+addr+"/v1/ws", &websocket.DialOptions{Subprotocols: []string{ws.Protocol}})
	if err != nil {
		b.Fatal(err)
	}
	ws.SetReadLimit(-1)
	b.Cleanup(func() { _ = ws.CloseNow() })
	for _, f := range []string{
		fmt.Sprintf(`{"id":1,"op":"connect","token":%q}`, tok),
		`{"id":2,"op":"subscribe","channel":"orders/1"}`,
	} {
		if err := ws.Write(ctx, websocket.MessageText, []byte(f)); err != nil {
			b.Fatal(err)
		}
	}
	for subscribed := false; !subscribed; { // up to the subscribe reply
		_, msg, err := ws.Read(ctx)
		if err != nil {
			b.Fatal(err)
		}
		subscribed = bytes.Contains(msg, []byte(`{"id":2,`))
	}
	return func(want int64) error {
		var n int64
		for n < want {
			_, msg, err := ws.Read(ctx)
			if err != nil {
				return fmt.Errorf("after %d publications: %w", n, err)
			}
			for f := range bytes.SplitSeq(msg, []byte("\n")) {
				if bytes.HasPrefix(f, []byte(`{"push":"pub"`)) {
					n++
				}
			}
		}
		return nil
	}
}

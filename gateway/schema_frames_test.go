package gateway

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/sse"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/gateway/internal/wstest"
)

// schemaSession drives a WebSocket client through every kind of server
// frame and checks each frame it receives against docs/schema.
type schemaSession struct {
	t    *testing.T
	js   *jsonSchema
	c    *wstest.Client
	seen map[string]int
}

// until reads frames, pings included, checking each, until one satisfies
// done; it returns that frame.
func (s *schemaSession) until(what string, done func(wstest.Frame) bool) wstest.Frame {
	s.t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case f, ok := <-s.c.Frames():
			if !ok {
				s.t.Fatalf("connection ended waiting for %s: %v", what, s.c.Err())
			}
			for _, k := range s.js.classify(s.t, f.Raw) {
				s.seen[k]++
			}
			if done(f) {
				return f
			}
		case <-timeout:
			s.t.Fatalf("no %s within a minute", what)
		}
	}
}

// reply sends op and reads until its reply.
func (s *schemaSession) reply(op string, fields map[string]any) wstest.Frame {
	s.t.Helper()
	id := s.c.Request(op, fields)
	return s.until(op+" reply", func(f wstest.Frame) bool { return f.Push == "" && f.ID == id })
}

// push reads until a push of kind.
func (s *schemaSession) push(kind string) wstest.Frame {
	s.t.Helper()
	return s.until(kind+" push", func(f wstest.Frame) bool { return f.Push == kind })
}

// TestFrameSchemaAgainstServer: every frame a real server sends in a
// session that meets each kind of frame — replies of every op, error
// replies with and without id, publications, pings, refresh,
// unsubscribed and disconnect pushes — matches docs/schema/herald.v1.json,
// and every definition there is met; so are an SSE stream's subscribed
// events and publications.
func TestFrameSchemaAgainstServer(t *testing.T) {
	t.Parallel()
	js := loadFrameSchema(t)
	e := newEnv(t, envOptions{history: 10, cfg: Config{
		HeartbeatInterval: 100 * time.Millisecond, ClientTimeout: time.Minute, HistorySize: 10, HistoryTTL: time.Hour,
	}})
	s := &schemaSession{t: t, js: js, c: e.dialWS(wstest.DialOpts{}), seen: map[string]int{}}

	s.c.SendFrame(`not json`)
	s.until("an error without id", func(f wstest.Frame) bool { return f.Error != nil && f.ID == 0 })
	if f := s.reply("nope", nil); f.Error == nil {
		t.Fatalf("unknown op answered %s", f.Raw)
	}
	// Closer to its exp than RefreshAhead: a refresh push follows.
	s.reply(ws.OpConnect, map[string]any{"token": e.mint("u1", time.Now().Add(30*time.Second),
		[]string{"orders/*", "users/u1"}, []string{"rooms/*"})})
	s.push("refresh")
	s.reply(ws.OpSubscribe, map[string]any{"channel": "orders/1"})
	p := e.publish("acme", "orders/2", `{"n":1}`)
	e.publish("acme", "orders/2", `2`)
	s.reply(ws.OpSubscribe, map[string]any{"channel": "orders/2", "since": ws.Position{Offset: p.Offset, Epoch: p.Epoch}})
	s.push("pub")
	s.reply(ws.OpSubscribe, map[string]any{"channel": "users/u1"})
	s.reply(ws.OpPublish, map[string]any{"channel": "rooms/lobby", "type": "chat.message", "schema_version": 1, "data": nil})
	s.reply(ws.OpUnsubscribe, map[string]any{"channel": "orders/1"})
	s.push("ping")
	s.reply(ws.OpRefresh, map[string]any{"token": e.mint("u1", time.Now().Add(time.Hour), []string{"orders/*"}, nil)})
	s.push("unsubscribed")
	s.reply(ws.OpPing, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.c.Conn.Write(ctx, websocket.MessageBinary, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	s.push("disconnect")

	sseCheck(t, e, js, s.seen)
	for _, k := range slices.Concat(frameKinds, resultKinds, []string{"envelope"}) {
		if s.seen[k] == 0 {
			t.Errorf("no frame met $defs/%s", k)
		}
	}
	t.Logf("frames checked per definition: %v", s.seen)
}

// sseCheck opens a stream resuming one channel and starting another live,
// and checks its subscribed events and publications.
func sseCheck(t *testing.T, e *testEnv, js *jsonSchema, seen map[string]int) {
	t.Helper()
	p := e.publish("acme", "orders/3", `1`)
	e.publish("acme", "orders/3", `2`)
	pos := session.NewPositions("acme", 1)
	pos.Add("orders/3", fanout.Position{Offset: p.Offset, Epoch: p.Epoch})
	var enc sse.CursorEncoder
	st := e.open(request{bearer: e.token("acme", "u1", "orders/*"), query: q("channel", "orders/3", "channel", "orders/4"),
		lastID: string(enc.Encode(pos.Entries))})
	st.next(t, 5*time.Second) // retry
	check := func(def, data string) {
		t.Helper()
		var v any
		if err := json.Unmarshal([]byte(data), &v); err != nil {
			t.Fatal(err)
		}
		if err := js.validate(js.def(t, def), v, def); err != nil {
			t.Fatalf("SSE data %s does not match $defs/%s: %v", data, def, err)
		}
		seen["sse "+def]++
	}
	for range 2 {
		ev, _ := st.subscribed(t)
		check("subscribeResult", ev.Data)
	}
	ev, _ := st.publication(t)
	check("envelope", ev.Data)
	seen["envelope"]++
}

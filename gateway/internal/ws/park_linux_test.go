package ws_test

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/ws"
)

// TestWSParkedConnection: an idle connection holds no goroutine: its
// reader parks it with the shared epoll instance and ends. The poller
// starts a reader for each request that comes, which parks it again; a
// publication reaches it parked; and the server's close ends it while
// parked.
func TestWSParkedConnection(t *testing.T) {
	if n := ws.IdleGoroutines(); n != 0 {
		t.Fatalf("an idle connection holds %d goroutines: epoll refused", n)
	}
	e := newEnv(t, envOptions{})
	c := e.connected("orders/*")
	c.Subscribe("orders/1", nil)
	parked := func() bool { return readers() == 0 }
	eventually(t, 10*time.Second, "the reader to park the connection", parked)
	for range 3 {
		c.OK(c.Request(ws.OpPing, nil), nil)
		eventually(t, 10*time.Second, "the reader to park the connection again", parked)
	}
	e.publish("acme", "orders/1", `"parked"`)
	if p := c.Pub(); p.Key.Channel != "orders/1" {
		t.Fatalf("publication on %q", p.Key.Channel)
	}
	eventually(t, 10*time.Second, "the reader to stay parked", parked)
	e.mu.Lock()
	for sc := range e.conns {
		sc.Close(session.ReasonShutdown, 0)
	}
	e.mu.Unlock()
	c.ClosedWith(session.ReasonShutdown.Code, session.CloseCode(session.ReasonShutdown))
	eventually(t, 10*time.Second, "the parked connection to end", func() bool {
		return e.closedFor(session.ReasonShutdown.Code) == 1
	})
}

// readers counts the goroutines that run a connection's reader.
func readers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return bytes.Count(buf[:n], []byte("internal/ws.(*Conn).run("))
		}
		buf = make([]byte, 2*len(buf))
	}
}

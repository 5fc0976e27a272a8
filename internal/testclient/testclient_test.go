package testclient

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// plain keeps no connection, nor its goroutines, after a test.
var plain = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// TestSSE: blocks are parsed field by field, heartbeats are reported, the
// end of the body is told once, and a non-200 answer is a StatusError.
func TestSSE(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("refuse") != "" {
			http.Error(w, `{"error":"no"}`, http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "retry: 2000\n\nevent: subscribed\nid: c1\ndata: {\"a\":1}\n\n: ping\n\nid: c2\r\ndata: x\r\ndata: y\r\n\r\n")
	}))
	defer srv.Close()

	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	var ended error
	s, err := OpenSSE(plain, req, SSEOptions{OnEnd: func(err error) { ended = err }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := []Event{
		{Retry: "2000"},
		{Name: "subscribed", ID: "c1", HasID: true, Data: `{"a":1}`},
		{Comments: []string{"ping"}},
		{ID: "c2", HasID: true, Data: "x\ny"},
	}
	for i, w := range want {
		ev, err := s.Next(5 * time.Second)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if ev.Name != w.Name || ev.ID != w.ID || ev.HasID != w.HasID || ev.Data != w.Data || ev.Retry != w.Retry ||
			strings.Join(ev.Comments, "|") != strings.Join(w.Comments, "|") {
			t.Fatalf("event %d: %+v, want %+v", i, ev, w)
		}
		if ev.Heartbeat() != (i == 2) {
			t.Fatalf("event %d: Heartbeat() = %v", i, ev.Heartbeat())
		}
	}
	if _, err := s.Next(5 * time.Second); !errors.Is(err, ErrEnded) {
		t.Fatalf("after the last block: %v", err)
	}
	if ended != io.EOF || s.Err() != io.EOF {
		t.Fatalf("ended with %v / %v, want EOF", ended, s.Err())
	}

	req, _ = http.NewRequest(http.MethodGet, srv.URL+"?refuse=1", nil)
	_, err = OpenSSE(plain, req, SSEOptions{})
	var se *StatusError
	if !errors.As(err, &se) || se.Status != http.StatusForbidden || !strings.Contains(se.Body, `"no"`) {
		t.Fatalf("refused request: %v", err)
	}
}

// TestSSECloseWhileFull: Close returns while the reader waits for the
// test to take events.
func TestSSECloseWhileFull(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i < 10; i++ {
			io.WriteString(w, "data: x\n\n")
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	s, err := OpenSSE(plain, req, SSEOptions{Buffer: 1})
	if err != nil {
		t.Fatal(err)
	}
	<-s.Events()
	s.Close()
}

// TestWS: frames of one message arrive one by one, pings are answered
// when asked, Stall holds the reader, and the close code is reported.
func TestWS(t *testing.T) {
	pongs := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{Protocol}})
		if err != nil {
			return
		}
		ctx := context.Background()
		_ = c.Write(ctx, websocket.MessageText, []byte(`{"id":1,"result":{}}`+"\n"+`{"push":"ping"}`+"\n"+`{"push":"x"}`))
		_, b, err := c.Read(ctx)
		if err != nil {
			return
		}
		pongs <- string(b)
		_ = c.Close(4000, "shutdown")
	}))
	defer srv.Close()
	c, _, err := DialWS(context.Background(), "ws"+strings.TrimPrefix(srv.URL, "http"),
		WSOptions{AnswerPings: true, HTTPClient: plain}, func(b []byte) string { return string(b) })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Conn.Subprotocol() != Protocol {
		t.Fatalf("subprotocol %q", c.Conn.Subprotocol())
	}
	for _, want := range []string{`{"id":1,"result":{}}`, `{"push":"x"}`} {
		if f, err := c.Next(5 * time.Second); err != nil || f != want {
			t.Fatalf("frame %q, %v; want %q", f, err, want)
		}
	}
	<-c.Pings()
	if p := <-pongs; p != `{"op":"pong"}` {
		t.Fatalf("the ping was answered with %q", p)
	}
	if _, err := c.Next(5 * time.Second); !errors.Is(err, ErrEnded) {
		t.Fatalf("after the close: %v", err)
	}
	if c.CloseStatus() != 4000 {
		t.Fatalf("close status %d (%v)", c.CloseStatus(), c.Err())
	}
}

// TestWSStallAndClose: a stalled reader reads nothing more until resumed,
// and Close stops it while stalled.
func TestWSStallAndClose(t *testing.T) {
	next := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{Protocol}})
		if err != nil {
			return
		}
		defer c.CloseNow()
		for i := range 2 {
			if err := c.Write(r.Context(), websocket.MessageText, []byte{'a' + byte(i)}); err != nil {
				return
			}
			<-next
		}
		_, _, _ = c.Read(r.Context())
	}))
	defer srv.Close()
	c, _, err := DialWS(context.Background(), "ws"+strings.TrimPrefix(srv.URL, "http"),
		WSOptions{HTTPClient: plain}, func(b []byte) string { return string(b) })
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := c.Next(5 * time.Second); f != "a" {
		t.Fatalf("first frame %q", f)
	}
	c.Stall()
	next <- struct{}{}
	c.Resume()
	if f, _ := c.Next(5 * time.Second); f != "b" {
		t.Fatalf("second frame %q", f)
	}
	c.Stall()
	next <- struct{}{}
	c.Close()
	c.Close()
}

// TestSSEStall: a stream goes on after Stall and Resume, and Close stops
// it while stalled.
func TestSSEStall(t *testing.T) {
	next := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, d := range []string{"a", "b"} {
			io.WriteString(w, "data: "+d+"\n\n")
			w.(http.Flusher).Flush()
			select {
			case <-next:
			case <-r.Context().Done():
				return
			}
		}
		<-r.Context().Done()
	}))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	s, err := OpenSSE(plain, req, SSEOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ev, _ := s.Next(5 * time.Second); ev.Data != "a" {
		t.Fatalf("first event %+v", ev)
	}
	s.Stall() // a read already waiting may still take "b"
	next <- struct{}{}
	s.Resume()
	if ev, _ := s.Next(5 * time.Second); ev.Data != "b" {
		t.Fatalf("second event %+v", ev)
	}
	s.Stall()
	s.Close()
}

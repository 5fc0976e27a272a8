package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/heraldgw/herald/gateway/internal/wstest"
)

// The clients of a transcript: dialing, opening, and matching what they
// receive against the recv steps.

// transcriptWS is a WebSocket client of a transcript, with the frame a
// recv* looked at and left for the next step.
type transcriptWS struct {
	*wstest.Client
	pending *wstest.Frame
}

// transcriptSSE is an SSE client of a transcript, with the event a recv*
// looked at and left for the next step.
type transcriptSSE struct {
	*sseStream
	pending *sseEvent
}

func (r *replay) wsConn(name string) *transcriptWS {
	c, ok := r.ws[name]
	if !ok {
		r.fatalf("no WebSocket %s", name)
	}
	return c
}

func (r *replay) dialWS(name string) {
	c, resp, err := wstest.Dial(r.t, "ws"+strings.TrimPrefix(r.base, "http"), wstest.DialOpts{Client: r.dial, Buffer: 4096}, r.dial)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		r.fatalf("dial: %d %v", status, err)
	}
	r.ws[name] = &transcriptWS{Client: c}
}

func (r *replay) openSSE(name string, args []string) {
	query, bearer := url.Values{}, ""
	for _, kv := range args {
		k, v, _ := strings.Cut(kv, "=")
		v = r.substitute(v, false)
		if k == "token" {
			bearer = v
			continue
		}
		query.Add(k, v)
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+"/v1/sse?"+query.Encode(), nil)
	if err != nil {
		cancel()
		r.fatalf("%v", err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := r.dial.Do(req)
	if err != nil {
		cancel()
		r.fatalf("open: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		cancel()
		r.fatalf("open: status %d", resp.StatusCode)
	}
	s := newSSEStream(resp, cancel)
	r.t.Cleanup(s.close)
	r.sse[name] = &transcriptSSE{sseStream: s}
}

// nextWS returns the next frame of c, failing when the connection ends.
func (r *replay) nextWS(c *transcriptWS) (wstest.Frame, bool) {
	select {
	case f, ok := <-c.Frames():
		return f, ok
	case <-time.After(time.Minute):
		r.fatalf("no frame within a minute")
	}
	return wstest.Frame{}, false
}

// recvWS matches the next frame (zero or more frames, with many) against
// want; it checks each frame against the schema.
func (r *replay) recvWS(c *transcriptWS, want string, many bool) {
	r.t.Helper()
	w := r.decode(want)
	for {
		f, ok := c.peek(r)
		if !ok {
			if many {
				return
			}
			r.fatalf("the connection ended (%v); want %s", c.Err(), want)
		}
		r.js.classify(r.t, f.Raw)
		var got any
		if err := decodeNumbers([]byte(f.Raw), &got); err != nil {
			r.fatalf("frame %s: %v", f.Raw, err)
		}
		saved := maps.Clone(r.vars)
		err := r.match(w, got, "frame")
		if err != nil {
			r.vars = saved
			if many {
				return // the frame is the next step's
			}
			r.fatalf("frame %s\n  does not match %s\n  %v", f.Raw, want, err)
		}
		c.pending = nil
		if !many {
			return
		}
	}
}

// peek returns the frame the next recv looks at, without taking it.
func (c *transcriptWS) peek(r *replay) (wstest.Frame, bool) {
	if c.pending == nil {
		f, ok := r.nextWS(c)
		if !ok {
			return wstest.Frame{}, false
		}
		c.pending = &f
	}
	return *c.pending, true
}

// recvSSE matches the next SSE event (zero or more events, with many)
// against the step; heartbeats are skipped.
func (r *replay) recvSSE(s *transcriptSSE, st step, many bool) {
	r.t.Helper()
	if len(st.args) < 2 {
		r.fatalf("recv C EVENT …")
	}
	for {
		ev, ok := s.peek(r)
		if !ok {
			if many {
				return
			}
			r.fatalf("the stream ended (%v)", s.err)
		}
		saved := maps.Clone(r.vars)
		if err := r.matchSSE(ev, st); err != nil {
			r.vars = saved
			if many {
				return // the event is the next step's
			}
			r.fatalf("%v", err)
		}
		s.pending = nil
		if !many {
			return
		}
	}
}

// matchSSE matches one SSE event against the step's event name, id and
// data, and checks the data of subscribed events and publications
// against the schema.
func (r *replay) matchSSE(ev sseEvent, st step) error {
	name := st.args[1]
	if name == "retry" {
		if len(st.args) < 3 || ev.Retry != st.args[2] || ev.Name != "" || ev.Data != "" || ev.HasID {
			return fmt.Errorf("block %+v, want retry %v", ev, st.args[2:])
		}
		return nil
	}
	if got := cmp.Or(ev.Name, "message"); got != name {
		return fmt.Errorf("event %q (%s), want %q", got, ev.Data, name)
	}
	wantID := ""
	for _, a := range st.args[2:] {
		if v, ok := strings.CutPrefix(a, "id="); ok {
			wantID = v
		}
	}
	if (wantID != "") != ev.HasID {
		return fmt.Errorf("event %s: id %q present %v, want %q", name, ev.ID, ev.HasID, wantID)
	}
	if wantID != "" {
		if err := r.match(wantID, ev.ID, "id"); err != nil {
			return fmt.Errorf("event %s: %v", name, err)
		}
	}
	var got any
	if err := decodeNumbers([]byte(ev.Data), &got); err != nil {
		return fmt.Errorf("event %s data %q: %v", name, ev.Data, err)
	}
	if def := map[string]string{"message": "envelope", "subscribed": "subscribeResult"}[name]; def != "" {
		var v any
		_ = json.Unmarshal([]byte(ev.Data), &v)
		if err := r.js.validate(r.js.def(r.t, def), v, def); err != nil {
			r.fatalf("event %s data %s does not match $defs/%s: %v", name, ev.Data, def, err)
		}
	}
	if err := r.match(r.decode(st.json), got, "data"); err != nil {
		return fmt.Errorf("event %s data %s\n  does not match %s\n  %v", name, ev.Data, st.json, err)
	}
	return nil
}

// peek returns the event the next recv looks at, without taking it;
// heartbeats are skipped.
func (s *transcriptSSE) peek(r *replay) (sseEvent, bool) {
	for s.pending == nil {
		select {
		case ev, ok := <-s.events:
			if !ok {
				return sseEvent{}, false
			}
			if !ev.Heartbeat() {
				s.pending = &ev
			}
		case <-time.After(time.Minute):
			r.fatalf("no event within a minute")
		}
	}
	return *s.pending, true
}

func (r *replay) closed(name string, args []string) {
	r.t.Helper()
	if s, ok := r.sse[name]; ok {
		if ev, ok := s.peek(r); ok {
			r.fatalf("event %+v, want the end of the stream", ev)
		}
		return
	}
	c := r.wsConn(name)
	if f, ok := c.peek(r); ok {
		r.fatalf("frame %s, want the end of the connection", f.Raw)
	}
	if len(args) == 0 {
		r.fatalf("closed C CODE")
	}
	code, err := strconv.Atoi(args[0])
	if err != nil {
		r.fatalf("code: %v", err)
	}
	if got := websocket.CloseStatus(c.Err()); int(got) != code {
		r.fatalf("closed with %d (%v), want %d", got, c.Err(), code)
	}
}

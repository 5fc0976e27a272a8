package gateway

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/subscriptions"
)

// The transcripts in testdata/transcripts are the normative examples of
// docs/protocol.md: each is a session of one or more clients with a real
// server, written as the lines below, one step a line ("#" starts a
// comment; a line ending in "\" goes on on the next).
//
//	config KEY=VALUE …           the server's settings (first lines only)
//	token NAME [KEY=VALUE …]     mint a token: sub, subscribe, publish
//	                             (comma lists), sid, jti, life (a duration)
//	dial C                       open a WebSocket C
//	open C KEY=VALUE …           open an SSE stream C: token=…, every other
//	                             pair a query parameter
//	send C JSON                  C sends a frame
//	recv C JSON                  the next WebSocket frame matches JSON
//	recv* C JSON                 zero or more next frames match JSON
//	recv C EVENT [id=PAT] JSON   the next SSE event is EVENT ("message" for
//	                             a publication) and its data matches JSON
//	recv C retry N               the next SSE block is the retry field
//	recv* C EVENT [id=PAT] JSON  zero or more next SSE events match
//	closed C [CODE]              the server ended C (WebSocket: with CODE)
//	close C                      C goes away (drops its connection)
//	publish CHANNEL [N]          the server publishes N (1) times
//	lag C CHANNEL N              publish N or more times, until C has had
//	                             to catch up from the history
//	stall C, resume C            C stops and starts reading its socket
//	                             (SSE: once it has taken what it buffered)
//	revoke sid=S | jti=J         revoke a session or a token
//	stop                         stop the server gracefully (Server.Stop)
//	hook called, hook release    wait for the held webhook call; answer it
//
// In an expected frame, a string value is a pattern when it starts with
// "$" or "~": "$_" matches any value, "$x" binds x to the value the first
// time and must equal it afterwards, "$x=" binds x whatever it held,
// "$x++" must be one more than x (any integer while x is unbound) and
// rebinds x, "~RE" is a regular
// expression the string must match. Everything else must be equal, and
// an object must have exactly the fields listed. In send and open lines,
// $x is replaced by x's value (JSON in frames, the bare string in query
// parameters). A token NAME binds NAME and NAME.exp (its exp, Unix
// seconds). Every WebSocket frame, and the data of every SSE subscribed
// event and publication, is also checked against docs/schema/herald.v1.json.
const transcriptDir = "testdata/transcripts"

func TestTranscripts(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(transcriptDir, "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts in %s: %v", transcriptDir, err)
	}
	js := loadFrameSchema(t)
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			t.Parallel()
			replayTranscript(t, js, f)
		})
	}
}

// step is one line of a transcript.
type step struct {
	line int
	verb string
	args []string // the words after the verb, up to the JSON
	json string   // the rest of the line from its first "{", if any
}

func (s step) String() string {
	return fmt.Sprintf("line %d: %s %s %s", s.line, s.verb, strings.Join(s.args, " "), s.json)
}

func parseTranscript(t *testing.T, path string) []step {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var steps []step
	var cont strings.Builder
	first := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if cont.Len() == 0 {
			first = n
		}
		if l, ok := strings.CutSuffix(line, `\`); ok {
			cont.WriteString(l)
			continue
		}
		cont.WriteString(line)
		line = cont.String()
		cont.Reset()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s := step{line: first}
		if i := strings.IndexByte(line, '{'); i >= 0 {
			line, s.json = line[:i], line[i:]
		}
		f := strings.Fields(line)
		s.verb, s.args = f[0], f[1:]
		steps = append(steps, s)
	}
	return steps
}

// replay is the state of one transcript's session.
type replay struct {
	t     *testing.T
	js    *jsonSchema
	e     *testEnv
	base  string       // where clients connect
	dial  *http.Client // the clients' HTTP client
	revs  *auth.MemoryRevocations
	hook  *heldHook
	vars  map[string]string // name → JSON value
	ws    map[string]*transcriptWS
	sse   map[string]*transcriptSSE
	where step
}

// heldHook is an authorization webhook that holds each call until
// released, then allows it.
type heldHook struct {
	srv     *httptest.Server
	called  chan struct{}
	release chan struct{}
}

func (r *replay) fatalf(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("%s: %s", r.where, fmt.Sprintf(format, args...))
}

func replayTranscript(t *testing.T, js *jsonSchema, path string) {
	steps := parseTranscript(t, path)
	r := &replay{t: t, js: js, revs: auth.NewMemoryRevocations(), vars: map[string]string{},
		ws: map[string]*transcriptWS{}, sse: map[string]*transcriptSSE{}}
	cfg := Config{HeartbeatInterval: time.Hour, ClientTimeout: 2 * time.Hour, ConnectAttemptsPerIP: -1}
	o := envOptions{history: 100}
	small := false
	for len(steps) > 0 && steps[0].verb == "config" {
		r.where = steps[0]
		for _, kv := range steps[0].args {
			k, v, _ := strings.Cut(kv, "=")
			small = small || k == "small_buffers"
			r.config(&cfg, &o, k, v)
		}
		steps = steps[1:]
	}
	cfg.HistorySize = o.history
	o.cfg = cfg
	o.deps = func(d *Deps) { d.Revocations = r.revs }
	if r.hook != nil {
		o.deps = func(d *Deps) {
			d.Revocations = r.revs
			d.Authorizer = webhookAuthorizer(t, r.hook.srv.URL)
		}
	}
	r.e = newEnv(t, o)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", r.e.logs)
		}
	})
	r.base, r.dial = "http://"+r.e.srv.Addr(), r.e.client
	if small {
		r.base, r.dial = smallBufferServer(t, r.e).URL, smallRecvClient(t)
	}
	for _, s := range steps {
		r.where = s
		r.step(s)
	}
	r.where = step{line: len(steps), verb: "(end)"}
	for name, c := range r.ws {
		if c.pending != nil {
			r.fatalf("client %s: a frame the transcript does not expect: %s", name, c.pending.Raw)
		}
		select {
		case f, ok := <-c.frames:
			if ok {
				r.fatalf("client %s: a frame the transcript does not expect: %s", name, f.Raw)
			}
		default:
		}
	}
	for name, s := range r.sse {
		if s.pending != nil {
			r.fatalf("client %s: an event the transcript does not expect: %+v", name, *s.pending)
		}
		select {
		case ev, ok := <-s.events:
			if ok && !ev.Heartbeat() {
				r.fatalf("client %s: an event the transcript does not expect: %+v", name, ev)
			}
		default:
		}
	}
}

func (r *replay) config(cfg *Config, o *envOptions, k, v string) {
	dur := func() time.Duration {
		d, err := time.ParseDuration(v)
		if err != nil {
			r.fatalf("%s=%s: %v", k, v, err)
		}
		return d
	}
	num := func() int {
		n, err := strconv.Atoi(v)
		if err != nil {
			r.fatalf("%s=%s: %v", k, v, err)
		}
		return n
	}
	switch k {
	case "history":
		o.history = num()
	case "history_ttl":
		cfg.HistoryTTL = dur()
	case "revalidate":
		cfg.RevalidateInterval = dur()
	case "refresh_ahead":
		cfg.RefreshAhead = dur()
	case "grace":
		cfg.ExpiryGrace = dur()
	case "queue_messages":
		cfg.QueueMaxMessages = num()
	case "queue_bytes":
		cfg.QueueMaxBytes = num()
	case "shutdown_delay":
		cfg.ShutdownReconnectDelay = dur()
	case "small_buffers":
	case "hook":
		if v != "hold" {
			r.fatalf("hook=%s: only hold is known", v)
		}
		r.hook = newHeldHook(r.t)
	default:
		r.fatalf("unknown setting %q", k)
	}
}

func newHeldHook(t *testing.T) *heldHook {
	h := &heldHook{called: make(chan struct{}, 16), release: make(chan struct{}, 16)}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		h.called <- struct{}{}
		select {
		case <-h.release:
		case <-req.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"allow": true, "ttl_seconds": 60})
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (r *replay) step(s step) {
	r.t.Helper()
	arg := func(i int) string {
		if i >= len(s.args) {
			r.fatalf("too few words")
		}
		return s.args[i]
	}
	switch s.verb {
	case "token":
		r.token(arg(0), s.args[1:])
	case "dial":
		r.dialWS(arg(0))
	case "open":
		r.openSSE(arg(0), s.args[1:])
	case "send":
		r.wsConn(arg(0)).send(r.substitute(s.json, true))
	case "recv":
		if c, ok := r.sse[arg(0)]; ok {
			r.recvSSE(c, s, false)
			return
		}
		r.recvWS(r.wsConn(arg(0)), s.json, false)
	case "recv*":
		if c, ok := r.sse[arg(0)]; ok {
			r.recvSSE(c, s, true)
			return
		}
		r.recvWS(r.wsConn(arg(0)), s.json, true)
	case "closed":
		r.closed(arg(0), s.args[1:])
	case "publish":
		n := 1
		if len(s.args) > 1 {
			n, _ = strconv.Atoi(s.args[1])
		}
		for i := range n {
			r.e.publish("acme", arg(0), strconv.Itoa(i+1))
		}
	case "lag":
		r.lag(arg(0), arg(1), arg(2))
	case "close":
		if c, ok := r.sse[arg(0)]; ok {
			c.close()
			delete(r.sse, arg(0))
			return
		}
		r.wsConn(arg(0)).close()
		delete(r.ws, arg(0))
	case "stall":
		if c, ok := r.sse[arg(0)]; ok {
			c.Stall()
			return
		}
		r.wsConn(arg(0)).stall()
	case "resume":
		if c, ok := r.sse[arg(0)]; ok {
			c.Resume()
			return
		}
		r.wsConn(arg(0)).resume()
	case "revoke":
		k, v, _ := strings.Cut(arg(0), "=")
		rev := auth.Revocation{Until: time.Now().Add(2 * time.Hour), Reason: "transcript"}
		switch k {
		case "sid":
			rev.SessionID = v
		case "jti":
			rev.TokenID = v
		default:
			r.fatalf("revoke what?")
		}
		if err := r.revs.Revoke(context.Background(), rev); err != nil {
			r.fatalf("revoke: %v", err)
		}
	case "stop":
		r.e.srv.Stop()
	case "hook":
		switch arg(0) {
		case "called":
			<-r.hook.called
		case "release":
			r.hook.release <- struct{}{}
		}
	default:
		r.fatalf("unknown step %q", s.verb)
	}
}

func (r *replay) token(name string, args []string) {
	c := auth.Claims{Subject: "u1", Tenant: "acme"}
	life := time.Hour
	for _, kv := range args {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "sub":
			c.Subject = v
		case "subscribe":
			c.Subscribe = strings.Split(v, ",")
		case "publish":
			c.Publish = strings.Split(v, ",")
		case "sid":
			c.SessionID = v
		case "jti":
			c.TokenID = v
		case "life":
			d, err := time.ParseDuration(v)
			if err != nil {
				r.fatalf("life: %v", err)
			}
			life = d
		default:
			r.fatalf("unknown token field %q", k)
		}
	}
	c.ExpiresAt = time.Now().Add(life).Truncate(time.Second).Add(time.Second)
	tok, err := auth.MintHS256(testSecret, c)
	if err != nil {
		r.fatalf("mint: %v", err)
	}
	r.vars[name] = strconv.Quote(tok)
	r.vars[name+".exp"] = strconv.FormatInt(c.ExpiresAt.Unix(), 10)
}

var transcriptVar = regexp.MustCompile(`\$[A-Za-z_][A-Za-z0-9_.]*`)

// substitute replaces each $x by x's JSON value, or its bare string when
// !asJSON.
func (r *replay) substitute(s string, asJSON bool) string {
	return transcriptVar.ReplaceAllStringFunc(s, func(m string) string {
		v, ok := r.vars[m[1:]]
		if !ok {
			r.fatalf("%s is not bound", m)
		}
		if !asJSON {
			var str string
			if json.Unmarshal([]byte(v), &str) == nil {
				return str
			}
		}
		return v
	})
}

// transcriptWS is a WebSocket client of a transcript, with the frame a
// recv* looked at and left for the next step.
type transcriptWS struct {
	*wsClient
	pending *wsFrame
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
	c, resp, err := dialWSURL(r.t, "ws"+strings.TrimPrefix(r.base, "http"), dialOpts{client: r.dial, buffer: 4096}, r.dial)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		r.fatalf("dial: %d %v", status, err)
	}
	r.ws[name] = &transcriptWS{wsClient: c}
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
func (r *replay) nextWS(c *transcriptWS) (wsFrame, bool) {
	select {
	case f, ok := <-c.frames:
		return f, ok
	case <-time.After(time.Minute):
		r.fatalf("no frame within a minute")
	}
	return wsFrame{}, false
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
			r.fatalf("the connection ended (%v); want %s", c.err, want)
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
func (c *transcriptWS) peek(r *replay) (wsFrame, bool) {
	if c.pending == nil {
		f, ok := r.nextWS(c)
		if !ok {
			return wsFrame{}, false
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
	if got := websocket.CloseStatus(c.err); int(got) != code {
		r.fatalf("closed with %d (%v), want %d", got, c.err, code)
	}
}

// lag publishes at least n 1 KiB publications on channel, and more until
// a connection of the transport of client has had to catch up.
func (r *replay) lag(client, channel, n string) {
	min, err := strconv.Atoi(n)
	if err != nil {
		r.fatalf("lag: %v", err)
	}
	transport := "ws"
	if _, ok := r.sse[client]; ok {
		transport = "sse"
	}
	catchUps := r.e.srv.metrics.catchUps.WithLabelValues(transport)
	before := r.e.counter(catchUps)
	data := `"` + strings.Repeat("x", 1<<10) + `"`
	for i := 0; i < min || r.e.counter(catchUps) == before; i++ {
		if i > 100*min {
			r.fatalf("no catch-up after %d publications", i)
		}
		r.e.publish("acme", channel, data)
	}
}

// decode reads an expected frame.
func (r *replay) decode(s string) any {
	var v any
	if err := decodeNumbers([]byte(s), &v); err != nil {
		r.fatalf("expected frame %s: %v", s, err)
	}
	return v
}

func decodeNumbers(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(v)
}

// match checks got against the pattern want, binding variables.
func (r *replay) match(want, got any, at string) error {
	switch w := want.(type) {
	case string:
		if p, ok := strings.CutPrefix(w, "~"); ok {
			s, isStr := got.(string)
			if !isStr || !regexp.MustCompile(p).MatchString(s) {
				return fmt.Errorf("%s: %v does not match /%s/", at, got, p)
			}
			return nil
		}
		if name, ok := strings.CutPrefix(w, "$"); ok {
			return r.bind(name, got, at)
		}
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: %v is not an object", at, got)
		}
		for k := range g {
			if _, ok := w[k]; !ok {
				return fmt.Errorf("%s: field %q is not expected", at, k)
			}
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				return fmt.Errorf("%s: no field %q", at, k)
			}
			if err := r.match(wv, gv, at+"."+k); err != nil {
				return err
			}
		}
		return nil
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Errorf("%s: %v is not an array of %d", at, got, len(w))
		}
		for i := range w {
			if err := r.match(w[i], g[i], fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
		return nil
	}
	wb, _ := json.Marshal(want)
	gb, _ := json.Marshal(got)
	if !bytes.Equal(wb, gb) {
		return fmt.Errorf("%s: %s, want %s", at, gb, wb)
	}
	return nil
}

func (r *replay) bind(name string, got any, at string) error {
	gb, _ := json.Marshal(got)
	if name == "_" {
		return nil
	}
	if base, ok := strings.CutSuffix(name, "="); ok {
		r.vars[base] = string(gb)
		return nil
	}
	if base, ok := strings.CutSuffix(name, "++"); ok {
		n, isNum := got.(json.Number)
		v, err := n.Int64()
		if !isNum || err != nil {
			return fmt.Errorf("%s: %s is not an integer", at, gb)
		}
		if prev, bound := r.vars[base]; bound && prev != strconv.FormatInt(v-1, 10) {
			return fmt.Errorf("%s: %d, want %s+1", at, v, prev)
		}
		r.vars[base] = n.String()
		return nil
	}
	if prev, bound := r.vars[name]; bound {
		if prev != string(gb) {
			return fmt.Errorf("%s: %s, want $%s = %s", at, gb, name, prev)
		}
		return nil
	}
	r.vars[name] = string(gb)
	return nil
}

// webhookAuthorizer asks the webhook at hookURL, with a minute's
// timeout, for channels no grant covers.
func webhookAuthorizer(t *testing.T, hookURL string) *subscriptions.Authorizer {
	t.Helper()
	a, err := subscriptions.NewAuthorizer(subscriptions.Config{WebhookURL: hookURL, WebhookTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestTranscriptPatterns: the patterns of an expected frame accept what
// they should and nothing else, and a failed match binds nothing.
func TestTranscriptPatterns(t *testing.T) {
	t.Parallel()
	r := &replay{t: t, vars: map[string]string{"n": "4", "s": `"x"`}}
	cases := []struct {
		want, got string
		ok        bool
	}{
		{`{"a":1}`, `{"a":1}`, true},
		{`{"a":1}`, `{"a":1,"b":2}`, false}, // a field not listed
		{`{"a":1,"b":2}`, `{"a":1}`, false}, // a field missing
		{`{"a":"$_"}`, `{"a":[1,{"b":null}]}`, true},
		{`{"a":"$n"}`, `{"a":4}`, true},
		{`{"a":"$n"}`, `{"a":5}`, false},
		{`{"a":"$s"}`, `{"a":"x"}`, true},
		{`{"a":"$n++"}`, `{"a":5}`, true}, // n is 5 from here on
		{`{"a":"$n++"}`, `{"a":5}`, false},
		{`{"a":"$n++"}`, `{"a":"6"}`, false},
		{`{"a":"$s="}`, `{"a":"y"}`, true}, // s is "y" from here on
		{`{"a":"$s"}`, `{"a":"x"}`, false},
		{`{"a":"~^[0-9]+$"}`, `{"a":"123"}`, true},
		{`{"a":"~^[0-9]+$"}`, `{"a":123}`, false},
		{`{"a":"$fresh","b":"$fresh"}`, `{"a":1,"b":2}`, false},
		{`[1,2]`, `[1,2,3]`, false},
		{`{"a":1.5}`, `{"a":1.50}`, false},
	}
	for _, c := range cases {
		saved := maps.Clone(r.vars)
		err := r.match(r.decode(c.want), r.decode(c.got), "frame")
		if (err == nil) != c.ok {
			t.Errorf("%s against %s: %v, want ok=%v", c.got, c.want, err, c.ok)
		}
		if err != nil {
			r.vars = saved
		}
	}
	if r.vars["n"] != "5" || r.vars["s"] != `"y"` || r.vars["fresh"] != "" {
		t.Fatalf("bindings after the cases: %v", r.vars)
	}
}

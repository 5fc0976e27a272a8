package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

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
		case f, ok := <-c.Frames():
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
	durations := map[string]*time.Duration{
		"history_ttl":    &cfg.HistoryTTL,
		"revalidate":     &cfg.RevalidateInterval,
		"refresh_ahead":  &cfg.RefreshAhead,
		"grace":          &cfg.ExpiryGrace,
		"shutdown_delay": &cfg.ShutdownReconnectDelay,
	}
	counts := map[string]*int{
		"history":        &o.history,
		"queue_messages": &cfg.QueueMaxMessages,
		"queue_bytes":    &cfg.QueueMaxBytes,
	}
	var err error
	switch {
	case durations[k] != nil:
		*durations[k], err = time.ParseDuration(v)
	case counts[k] != nil:
		*counts[k], err = strconv.Atoi(v)
	case k == "small_buffers":
	case k == "hook":
		if v != "hold" {
			r.fatalf("hook=%s: only hold is known", v)
		}
		r.hook = newHeldHook(r.t)
	default:
		r.fatalf("unknown setting %q", k)
	}
	if err != nil {
		r.fatalf("%s=%s: %v", k, v, err)
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
		r.wsConn(arg(0)).SendFrame(r.substitute(s.json, true))
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
		r.wsConn(arg(0)).Close()
		delete(r.ws, arg(0))
	case "stall":
		if c, ok := r.sse[arg(0)]; ok {
			c.Stall()
			return
		}
		r.wsConn(arg(0)).Stall()
	case "resume":
		if c, ok := r.sse[arg(0)]; ok {
			c.Resume()
			return
		}
		r.wsConn(arg(0)).Resume()
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

package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/heraldgw/herald/gateway/internal/session"
)

// The operator view: a read-only page at GET /ops/ (ops/index.html, with
// ops/ops.js and ops/ops.css beside it) that asks for the admin token and
// polls GET /ops/status, which answers, to "Authorization: Bearer
// <Config.AdminToken>" only, what /readyz checks, the open connections and
// the outbox backlog. Without Config.AdminToken every route of it answers
// 404. docs/operator.md describes it.

// MinAdminTokenLen is the length, in bytes, below which an admin token is
// refused.
const MinAdminTokenLen = 16

// CheckAdminToken reports why token cannot be a Config.AdminToken: shorter
// than MinAdminTokenLen, or holding a byte that is not visible ASCII (it
// travels in an Authorization header, typed or pasted into the page). The
// error never quotes the token.
func CheckAdminToken(token string) error {
	if len(token) < MinAdminTokenLen {
		return fmt.Errorf("must be at least %d bytes, got %d", MinAdminTokenLen, len(token))
	}
	for i := 0; i < len(token); i++ {
		if b := token[i]; b <= ' ' || b >= 0x7f {
			return fmt.Errorf("must be visible ASCII (no spaces or control bytes), byte %d is not", i+1)
		}
	}
	return nil
}

// OpsSource gives the operator view the outbox numbers. cmd/herald supplies
// one over its outbox store; a node without a store has none, and the view
// says so.
type OpsSource interface {
	// OutboxStatus reads the backlog. It runs on every GET /ops/status
	// (every few seconds while a page is open), so it must be cheap.
	OutboxStatus(ctx context.Context) (OutboxStatus, error)
}

// OutboxStatus is the outbox backlog as the operator view shows it.
type OutboxStatus struct {
	// Pending counts the records not yet dispatched.
	Pending int64
	// DeadLetters counts the dead-lettered records.
	DeadLetters int64
	// OldestPending is when the oldest record not yet dispatched occurred;
	// zero when none waits.
	OldestPending time.Time
	// OldestPendingAge is how long that record has waited, by the store's
	// clock; zero when none waits.
	OldestPendingAge time.Duration
	// Handlers are the outbox handlers (docs/handlers.md), realtime first;
	// the counts above are realtime's.
	Handlers []HandlerStatus
}

// HandlerStatus is one outbox handler as the operator view shows it. It
// never holds a secret.
type HandlerStatus struct {
	Name string `json:"name"`
	Type string `json:"type"`
	// State is active, paused or disabled.
	State            string  `json:"state"`
	StateReason      string  `json:"state_reason,omitempty"`
	Pending          int64   `json:"pending"`
	DeadLetters      int64   `json:"dead_letters"`
	OldestPendingAge float64 `json:"oldest_pending_age_seconds"`
	// TargetUp is false while the handler's target (a webhook endpoint)
	// fails continuously, since FailingSince, with LastError.
	TargetUp     bool       `json:"target_up"`
	FailingSince *time.Time `json:"failing_since,omitempty"`
	LastError    string     `json:"last_error,omitempty"`
}

//go:embed ops/index.html ops/ops.js ops/ops.css
var opsFiles embed.FS

// opsCSP is stricter than the demo page's: no inline script or style at
// all, every resource and request from this origin, no framing.
const opsCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// opsStatusTimeout bounds the readiness checks and the outbox reading of
// one /ops/status answer.
const opsStatusTimeout = readyCheckTimeout

// opsPaths are the routes of the operator view.
var opsPaths = []string{"/ops", "/ops/{$}", "/ops/ops.js", "/ops/ops.css", "/ops/status"}

// opsRoutes adds the operator view's routes to mux: the page, its two
// files and /ops/status when Config.AdminToken is set, else 404s.
func (s *Server) opsRoutes(mux *http.ServeMux) {
	if s.cfg.AdminToken == "" {
		for _, p := range opsPaths {
			mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
				writeError(w, http.StatusNotFound, "not_found", "the operator view is not enabled on this server (it needs an admin token)")
			})
		}
		return
	}
	mux.Handle("/ops", methods(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ops/", http.StatusMovedPermanently)
	}, http.MethodGet, http.MethodHead))
	mux.Handle("/ops/{$}", methods(opsFile("index.html", "text/html; charset=utf-8"), http.MethodGet, http.MethodHead))
	mux.Handle("/ops/ops.js", methods(opsFile("ops.js", "text/javascript; charset=utf-8"), http.MethodGet, http.MethodHead))
	mux.Handle("/ops/ops.css", methods(opsFile("ops.css", "text/css; charset=utf-8"), http.MethodGet, http.MethodHead))
	mux.Handle("/ops/status", methods(s.limitAttempts("", s.handleOpsStatus(sha256.Sum256([]byte(s.cfg.AdminToken)))), http.MethodGet))
}

// opsFile serves one embedded file of the page. The files hold no secret:
// only /ops/status needs the token.
func opsFile(name, contentType string) http.HandlerFunc {
	b, err := opsFiles.ReadFile("ops/" + name)
	if err != nil {
		panic("gateway: operator view file not embedded: " + name) // go:embed names it; cannot happen
	}
	return func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", contentType)
		h.Set("Cache-Control", "no-cache")
		h.Set("Content-Security-Policy", opsCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			_, _ = w.Write(b)
		}
	}
}

// opsStatus is the body of GET /ops/status.
type opsStatus struct {
	// Time is when the snapshot was taken (this node's clock, UTC).
	Time        time.Time      `json:"time"`
	Readiness   readyAnswer    `json:"readiness"`
	Connections opsConnections `json:"connections"`
	Outbox      opsOutbox      `json:"outbox"`
}

// opsConnections counts the open realtime connections of this node.
type opsConnections struct {
	SSE       int `json:"sse"`
	WebSocket int `json:"ws"`
	Total     int `json:"total"`
	// Max is Config.MaxConnections, the bound on Total.
	Max int `json:"max"`
}

// opsOutbox is the backlog, or why it is not known: Status is "ok",
// "error: …" (the store failed; the numbers are null) or "unavailable: …"
// (no store on this node).
type opsOutbox struct {
	Status                  string          `json:"status"`
	Pending                 *int64          `json:"pending"`
	DeadLetters             *int64          `json:"dead_letters"`
	OldestPending           *time.Time      `json:"oldest_pending"`
	OldestPendingAgeSeconds *float64        `json:"oldest_pending_age_seconds"`
	Handlers                []HandlerStatus `json:"handlers"`
}

// handleOpsStatus answers GET /ops/status to the admin token whose SHA-256
// is want. Comparing digests in constant time tells nothing of the token,
// its length included.
func (s *Server) handleOpsStatus(want [sha256.Size]byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if msg := opsCredentialProblem(r, want); msg != "" {
			s.connLog.Log(slog.LevelWarn, "gateway: operator view refused",
				slog.String("remote", clientOf(r).remote), slog.String("message", msg))
			w.Header().Set("WWW-Authenticate", `Bearer realm="herald operator view"`)
			writeError(w, http.StatusUnauthorized, session.ReasonUnauthorized.Code, msg)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), opsStatusTimeout)
		defer cancel()
		var ans opsStatus
		var wg sync.WaitGroup
		wg.Go(func() { ans.Readiness = s.readiness(ctx) })
		wg.Go(func() { ans.Outbox = s.outboxStatus(ctx) })
		wg.Wait()
		ans.Connections = s.connectionCounts()
		ans.Time = time.Now().UTC().Truncate(time.Millisecond)
		writeJSON(w, http.StatusOK, ans)
	}
}

// opsCredentialProblem says why r does not carry the admin token; "" when
// it does. Only the Authorization header counts: never a cookie (no
// cross-site request can send the header) nor the URL (it would be logged).
func opsCredentialProblem(r *http.Request, want [sha256.Size]byte) string {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "no admin token: send Authorization: Bearer <admin token>"
	}
	scheme, tok, ok := strings.Cut(h, " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return `the Authorization header must be "Bearer <admin token>"`
	}
	got := sha256.Sum256([]byte(tok))
	if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
		return "the admin token is not accepted"
	}
	return ""
}

// readiness runs every ReadyCheck concurrently and reports as /readyz
// does, shutdown included.
func (s *Server) readiness(ctx context.Context) readyAnswer {
	results := make([]error, len(s.deps.ReadyChecks))
	var wg sync.WaitGroup
	for i, c := range s.deps.ReadyChecks {
		wg.Go(func() { results[i] = c.Check(ctx) })
	}
	wg.Wait()
	ans := readyAnswer{Status: "ready", Checks: make(map[string]string, len(results)+1)}
	for i, c := range s.deps.ReadyChecks {
		if results[i] != nil {
			ans.Status = "not_ready"
			ans.Checks[c.Name] = "error: " + results[i].Error()
		} else {
			ans.Checks[c.Name] = "ok"
		}
	}
	s.mu.Lock()
	draining := s.draining
	s.mu.Unlock()
	if draining {
		ans.Status = "not_ready"
		ans.Checks["shutdown"] = "error: the server is shutting down"
	}
	return ans
}

// outboxStatus reads the backlog from the OpsSource; a failure or a
// missing source becomes the status, never an error of the answer.
func (s *Server) outboxStatus(ctx context.Context) opsOutbox {
	src := s.deps.Ops
	if src == nil {
		return opsOutbox{Status: "unavailable: this node has no outbox store"}
	}
	st, err := src.OutboxStatus(ctx)
	if err != nil {
		s.connLog.Log(slog.LevelWarn, "gateway: operator view: reading the outbox failed", slog.String("error", err.Error()))
		return opsOutbox{Status: "error: " + err.Error()}
	}
	out := opsOutbox{Status: "ok", Pending: &st.Pending, DeadLetters: &st.DeadLetters, Handlers: st.Handlers}
	if out.Handlers == nil {
		out.Handlers = []HandlerStatus{}
	}
	if !st.OldestPending.IsZero() {
		t := st.OldestPending.UTC()
		age := max(0, st.OldestPendingAge).Seconds()
		out.OldestPending, out.OldestPendingAgeSeconds = &t, &age
	}
	return out
}

// connectionCounts counts the registered connections by transport.
func (s *Server) connectionCounts() opsConnections {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := opsConnections{Total: len(s.conns), Max: s.cfg.MaxConnections}
	for c := range s.conns {
		switch c.Transport {
		case transportSSE:
			n.SSE++
		case transportWS:
			n.WebSocket++
		}
	}
	return n
}

package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/subscriptions"
)

// The WebSocket transport (GET /v1/ws, subprotocol herald.v1; the protocol
// is docs/protocol.md): the handler checks the handshake and the upgrade
// request's credential, then hands the connection to internal/ws, which
// reads, answers and times it (ws.Conn) and writes it through the core's
// writer (ws.Server is what it needs of the Server: wsHost below).

// handleWS serves GET /v1/ws: it checks the handshake (Upgrade, subprotocol
// herald.v1, Origin, query string) and the connection bounds before
// upgrading, then runs the connection until it ends. Every refusal before
// the upgrade is counted in herald_connect_refusals_total, and so is a
// connection closed before its connect succeeded (ws.Conn.Run).
func (s *Server) handleWS(w http.ResponseWriter, r *http.Request) {
	if !offersToken(r.Header, "Upgrade", "websocket") {
		s.metrics.refused(transportWS, session.ReasonBadRequest)
		w.Header().Set("Upgrade", "websocket")
		writeError(w, http.StatusUpgradeRequired, session.ReasonBadRequest.Code,
			"this endpoint speaks WebSocket: send an Upgrade: websocket request offering the subprotocol "+ws.Protocol)
		return
	}
	if !offersToken(r.Header, "Sec-WebSocket-Protocol", ws.Protocol) {
		s.refuseSubprotocol(w, r)
		return
	}
	if !s.originAllowed(r) {
		s.refuseConn(w, r, transportWS, session.ReasonForbidden, fmt.Sprintf(
			"origin %q may not open a WebSocket on this server (AllowedOrigins)", trunc(r.Header.Get("Origin"), 100)))
		return
	}
	// A malformed request is refused here, with the 400 every client can
	// read, not after the upgrade: close code 4500 is reserved.
	query, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		s.refuseConn(w, r, transportWS, session.ReasonBadRequest, fmt.Sprintf("malformed query string: %v", err))
		return
	}
	if !s.acquireSlot() {
		w.Header().Set("Retry-After", "1")
		s.refuseConn(w, r, transportWS, session.ReasonTooManyConnections, "")
		return
	}
	handedOff := false // to the connection's goroutine, which releases the slot
	defer func() {
		if !handedOff {
			s.releaseSlot()
		}
	}()

	hc := s.upgradeCredentials(r, query)
	if hc.Claims != nil && s.users.full(userKey(hc.Claims)) {
		s.metrics.limit(limitUserConns)
		w.Header().Set("Retry-After", "1")
		s.refuseConn(w, r, transportWS, s.userLimitReason(), "")
		return
	}

	conn := s.newConn(transportWS, &auth.Claims{}, clientOf(r).remote)
	wc := ws.NewConn(s.wsEnv, conn, hc)
	hj := &ws.Hijacker{ResponseWriter: w, MaxMessage: int64(s.cfg.MaxMessageSize)}
	wsc, err := websocket.Accept(hj, r, &websocket.AcceptOptions{
		Subprotocols:       []string{ws.Protocol},
		InsecureSkipVerify: true, // originAllowed has checked the Origin
		OnPingReceived: func(context.Context, []byte) bool {
			wc.Touch()
			return true
		},
		OnPongReceived: func(context.Context, []byte) { wc.Touch() },
	})
	if err != nil {
		// Accept has answered the request (a broken handshake: 4xx).
		s.metrics.refused(transportWS, session.ReasonBadRequest)
		s.connLog.Log(slog.LevelDebug, "gateway: websocket upgrade failed",
			slog.String("remote", clientOf(r).remote), slog.String("error", err.Error()))
		conn.Cancel()
		return
	}
	// From here on r.Context() must not be used: the connection is hijacked.
	wc.Attach(wsc, hj.Conn)
	if !s.register(conn) {
		conn.Close(session.ReasonShutdown, s.reconnectJitter())
	}
	handedOff = true
	go wc.Run()
}

// refuseSubprotocol answers a handshake that offers none of the
// subprotocols the server speaks: 400 bad_request, naming what was
// offered and, in the message and in "protocols", what would do.
func (s *Server) refuseSubprotocol(w http.ResponseWriter, r *http.Request) {
	msg := "no WebSocket subprotocol offered"
	var tokens []string
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for t := range strings.SplitSeq(v, ",") {
			if t = strings.TrimSpace(t); t != "" {
				tokens = append(tokens, t)
			}
		}
	}
	if offered := strings.Join(tokens, ", "); offered != "" {
		msg = fmt.Sprintf("WebSocket subprotocols offered, %q, are not supported", trunc(offered, 100))
	}
	msg += "; this server speaks " + strings.Join(ws.Protocols, ", ") + ": offer one in Sec-WebSocket-Protocol"
	s.metrics.refused(transportWS, session.ReasonBadRequest)
	writeJSON(w, session.ReasonBadRequest.Status, errorBody{Error: errorDetail{
		Code: session.ReasonBadRequest.Code, Message: msg, Protocols: ws.Protocols,
	}})
}

// upgradeCredentials reads the credential the upgrade request carried. A
// token is verified and admitted (with ExpiryGrace, as connect does) now,
// so authentication is decided before MaxConnectionsPerUser is looked at:
// an expired or revoked token hears token_expired or revoked at connect,
// never a 429. A ticket is only noted: connect redeems it if it relies on
// it, so an upgrade refused for anything, or a connect that brings its own
// token, leaves the ticket unspent.
func (s *Server) upgradeCredentials(r *http.Request, query url.Values) ws.Credentials {
	cred, reason, msg := s.requestCredential(r, query)
	hc := ws.Credentials{Source: cred.source, Ticket: cred.ticket, Reason: reason, Msg: msg}
	if reason.Code == "" && cred.token != "" {
		hc.Claims, hc.Reason, hc.Msg = s.checkToken(cred, s.cfg.ExpiryGrace)
	}
	return hc
}

// newWSEnv is what the WebSocket connections of s share.
func newWSEnv(s *Server) *ws.Env {
	cfg := &s.cfg
	return &ws.Env{
		Server: (*wsHost)(s),
		Config: ws.Config{
			Version:           cfg.Version,
			CookieName:        cfg.CookieName,
			MaxMessageSize:    cfg.MaxMessageSize,
			MaxSubscriptions:  cfg.MaxSubscriptions,
			MaxInflight:       cfg.MaxInflight,
			HistorySize:       cfg.HistorySize,
			HistoryTTL:        cfg.HistoryTTL,
			WriteTimeout:      cfg.WriteTimeout,
			ConnectTimeout:    cfg.ConnectTimeout,
			ClientTimeout:     cfg.ClientTimeout,
			HeartbeatInterval: cfg.HeartbeatInterval,
			ExpiryGrace:       cfg.ExpiryGrace,
			RefreshAhead:      cfg.RefreshAhead,
		},
		Log:      s.connLog,
		Requests: s.metrics.wsRequests,
	}
}

// wsHost is the Server as its WebSocket connections see it (ws.Server).
type wsHost Server

func (h *wsHost) VerifyToken(token, source string) (*auth.Claims, session.Reason, string) {
	return (*Server)(h).verifyToken(token, source)
}

func (h *wsHost) RedeemTicket(ctx context.Context, ticket string) (*auth.Claims, session.Reason, string) {
	return (*Server)(h).redeemTicket(ctx, ticket)
}

func (h *wsHost) Admit(c *auth.Claims, source string, slack time.Duration) (session.Reason, string) {
	return (*Server)(h).admit(c, source, slack)
}

func (h *wsHost) AcquireUser(c *session.Conn, claims *auth.Claims) bool {
	return (*Server)(h).acquireUser(c, claims)
}

func (h *wsHost) UserLimitReason() session.Reason { return (*Server)(h).userLimitReason() }
func (h *wsHost) Opened(c *session.Conn)          { (*Server)(h).opened(c) }
func (h *wsHost) Closed(c *session.Conn)          { (*Server)(h).closed(c) }
func (h *wsHost) Unregister(c *session.Conn)      { (*Server)(h).unregister(c) }
func (h *wsHost) ReleaseUser(c *session.Conn)     { (*Server)(h).releaseUser(c) }
func (h *wsHost) ReleaseSlot()                    { (*Server)(h).releaseSlot() }
func (h *wsHost) Limit(limit string)              { h.metrics.limit(limit) }
func (h *wsHost) Refused(r session.Reason)        { h.metrics.refused(transportWS, r) }

// Publisher returns Deps.Broker when it can publish: client publications
// on interactive channels go through the broker (history and fan-out),
// never through the outbox.
func (h *wsHost) Publisher() ws.Publisher {
	p, _ := h.deps.Broker.(ws.Publisher)
	return p
}

func (h *wsHost) Authorize(ctx context.Context, r subscriptions.Request) (subscriptions.Decision, error) {
	return h.deps.Authorizer.Authorize(ctx, r)
}

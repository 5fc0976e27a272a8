package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/ws"
)

// The WebSocket transport (GET /v1/ws, subprotocol herald.v1; the protocol
// is docs/protocol.md): the handler checks the handshake, the bounds and
// the upgrade request's credential, then hands the connection to
// internal/ws, which reads, answers and times it (ws.Conn) and writes it
// through the core's writer. What the connection gets of the server are
// values and functions: the bounds (session.Bounds), the broker's publish,
// the authorizer, and its admission at connect (wsAdmission below), which
// the server decides; once the connection ended the server releases what
// it held.

// handleWS serves GET /v1/ws: it checks the handshake (Upgrade, subprotocol
// herald.v1, Origin, query string) and the connection bounds before
// upgrading, then runs the connection until it ends. Every refusal before
// the upgrade is counted in herald_connect_refusals_total, and so is a
// connection closed before its connect succeeded (ws.Conn.Start).
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

	cred := s.upgradeCredentials(r, query)
	adm := &wsAdmission{s: s, cred: &cred}
	if cred.claims != nil && s.users.full(userKey(cred.claims)) {
		s.metrics.limit(limitUserConns)
		w.Header().Set("Retry-After", "1")
		s.refuseConn(w, r, transportWS, s.userLimitReason(), "")
		return
	}

	conn := s.newConn(transportWS, &auth.Claims{}, clientOf(r).remote)
	adm.c = conn
	wc, err := ws.Accept(w, r, s.wsEnv, conn, adm.connect)
	if err != nil {
		// Accept has answered the request (a broken handshake: 4xx).
		s.metrics.refused(transportWS, session.ReasonBadRequest)
		s.connLog.Log(slog.LevelDebug, "gateway: websocket upgrade failed",
			slog.String("remote", clientOf(r).remote), slog.String("error", err.Error()))
		conn.Cancel()
		return
	}
	// From here on r.Context() must not be used: the connection is hijacked.
	if !s.register(conn) {
		conn.Close(session.ReasonShutdown, s.reconnectJitter())
	}
	handedOff = true
	wc.Start(adm.end)
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

// upgradeCredential is what the upgrade request carried, if anything: the
// claims of its verified and admitted token, a ticket not yet redeemed,
// or why the credential was refused. A connect frame without a token uses
// it.
type upgradeCredential struct {
	claims *auth.Claims
	ticket string // redeemed by connect
	source string
	reason session.Reason // non-empty Code: the credential was refused
	msg    string
}

// upgradeCredentials reads the credential the upgrade request carried. A
// token is verified and admitted (with ExpiryGrace, as connect does) now,
// so authentication is decided before MaxConnectionsPerUser is looked at:
// an expired or revoked token hears token_expired or revoked at connect,
// never a 429. A ticket is only noted: connect redeems it if it relies on
// it, so an upgrade refused for anything, or a connect that brings its own
// token, leaves the ticket unspent.
func (s *Server) upgradeCredentials(r *http.Request, query url.Values) upgradeCredential {
	cred, reason, msg := s.requestCredential(r, query)
	uc := upgradeCredential{source: cred.source, ticket: cred.ticket, reason: reason, msg: msg}
	if reason.Code == "" && cred.token != "" {
		uc.claims, uc.reason, uc.msg = s.checkToken(cred, s.cfg.ExpiryGrace)
	}
	return uc
}

// wsAdmission is the server's side of one WebSocket connection: it admits
// the connection at its connect request (ws.Connect) and releases what
// the connection held once it ended.
type wsAdmission struct {
	s *Server
	c *session.Conn
	// cred is what the upgrade request carried, until connect takes it:
	// an idle connection keeps none of it.
	cred *upgradeCredential
	// opened: the connect succeeded and the connection was counted open.
	// Set on the goroutine the connection's reader waits for, read after
	// the reader is done.
	opened bool
}

// connect admits the connection at its connect request: with the connect
// frame's token when it has one, else with the upgrade request's
// credential (a ticket is redeemed only now); then the claims are admitted
// (revocation, expiry with ExpiryGrace), the user's slot is taken and the
// connection is counted open.
func (a *wsAdmission) connect(ctx context.Context, token string) (*auth.Claims, session.Reason, string) {
	s, cred := a.s, a.cred
	if cred == nil { // connect comes once (ws.Conn refuses a second one)
		cred = &upgradeCredential{}
	}
	a.cred = nil
	var claims *auth.Claims
	var reason session.Reason
	var msg string
	source := sourceFrame
	switch {
	case token != "":
		claims, reason, msg = s.verifyToken(token, source)
	case cred.reason.Code != "":
		reason, msg = cred.reason, cred.msg
	case cred.ticket != "":
		// Spent even if the connect is refused below: see redeemTicket.
		claims, reason, msg = s.redeemTicket(ctx, cred.ticket)
		source = sourceTicket
	case cred.claims != nil:
		claims, source = cred.claims, cred.source
	default:
		reason, msg = session.ReasonUnauthorized, fmt.Sprintf(
			"no token: put it in the connect frame's token field, or send it with the upgrade request "+
				"(Authorization: Bearer, the %s cookie, a ticket or the access_token query parameter)", s.cfg.CookieName)
	}
	if reason.Code != "" {
		return nil, reason, msg
	}
	if reason, msg := s.admit(claims, source, s.cfg.ExpiryGrace); reason.Code != "" {
		return nil, reason, msg
	}
	if !s.acquireUser(a.c, claims) {
		return nil, s.userLimitReason(), ""
	}
	a.c.Claims = claims
	a.opened = true
	s.opened(a.c)
	return claims, session.Reason{}, ""
}

// end releases what the connection held once its ws.Conn ended: the
// user's slot, the registration and the server's slot, and counts it
// closed, or refused when it closed before its connect succeeded.
func (a *wsAdmission) end() {
	s, c := a.s, a.c
	s.releaseUser(c)
	switch r := c.Reason(); {
	case a.opened:
		s.closed(c)
	case r.Code != session.ReasonClientClosed.Code:
		// Closed by the server before connect succeeded: a refused connect,
		// no connect in time, a request before connect, a shutdown.
		s.metrics.refused(transportWS, r)
	}
	s.release(c)
}

// newWSEnv is what the WebSocket connections of s share.
func newWSEnv(s *Server) *ws.Env {
	env := &ws.Env{
		Version:   s.cfg.Version,
		Authorize: s.deps.Authorizer.Authorize,
		Refresh:   s.refreshToken,
		Log:       s.connLog,
		Requests:  s.metrics.wsRequests,
		Limits:    s.metrics.limitRejections,
	}
	// Client publications on interactive channels go through the broker
	// (history and fan-out), never through the outbox.
	if p, ok := s.deps.Broker.(publisher); ok {
		env.Publish = p.Publish
	}
	return env
}

// publisher is a broker that takes client publications (fanout.Broker).
type publisher interface {
	Publish(ctx context.Context, msg fanout.Message) (fanout.Publication, error)
}

// refreshToken verifies the token of a WebSocket's refresh request and
// admits its claims, as connect does.
func (s *Server) refreshToken(token string) (*auth.Claims, session.Reason, string) {
	const source = "refresh"
	claims, reason, msg := s.verifyToken(token, source)
	if reason.Code == "" {
		reason, msg = s.admit(claims, source, s.cfg.ExpiryGrace)
	}
	return claims, reason, msg
}

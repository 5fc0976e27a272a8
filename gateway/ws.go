package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/coder/websocket"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/fanout"
)

// The WebSocket transport (GET /v1/ws, subprotocol herald.v1; the protocol
// is docs/protocol.md). Each connection has:
//
//   - a reader, which owns the connection: a goroutine of its own
//     (wsConn.run), started by the HTTP handler, which then returns, so
//     net/http's request and buffers are not kept for the connection's
//     lifetime. It reads every frame (never under a deadline context,
//     which would close the connection) with a small read buffer
//     (ws_netconn.go) and handles each on a short-lived goroutine it waits
//     for (wsConn.handleApart), so its own stack stays small: connect,
//     ping and unsubscribe are answered there, and subscribe, publish and
//     refresh start a goroutine each, at most MaxInflight at once;
//   - the connection core's writer (internal/session/conn_writer.go),
//     started on demand whenever something is queued and gone again once
//     the queues are empty, so an idle connection holds one goroutine. The writer is the
//     only one to write data frames: through wsSink it batches everything
//     queued into messages of newline-separated frames, each message
//     written under its own deadline, and it performs the subscriptions'
//     hub and history work, so a subscription's reply, its recovered
//     publications and its live ones leave in order;
//   - timers instead of goroutines for the connect timeout, the client
//     timeout, the server's pings (the core's heartbeat) and the token's
//     expiry (ws_expiry.go); revocation and re-authorization are the
//     server-wide revalidation timer's (revalidate.go), which ends a
//     subscription or the connection through the core.

// publisher is a broker that takes client publications (fanout.Broker).
type publisher interface {
	Publish(ctx context.Context, msg fanout.Message) (fanout.Publication, error)
}

// publisher returns Deps.Broker when it can publish: client publications
// on interactive channels go through the broker (history and fan-out),
// never through the outbox.
func (s *Server) publisher() publisher {
	p, _ := s.deps.Broker.(publisher)
	return p
}

// handleWS serves GET /v1/ws: it checks the handshake (Upgrade, subprotocol
// herald.v1, Origin, query string) and the connection bounds before
// upgrading, then runs the connection until it ends. Every refusal before
// the upgrade is counted in herald_connect_refusals_total, and so is a
// connection closed before its connect succeeded (wsConn.run).
func (s *Server) handleWS(w http.ResponseWriter, r *http.Request) {
	if !offersToken(r.Header, "Upgrade", "websocket") {
		s.metrics.refused(transportWS, ReasonBadRequest)
		w.Header().Set("Upgrade", "websocket")
		writeError(w, http.StatusUpgradeRequired, ReasonBadRequest.Code,
			"this endpoint speaks WebSocket: send an Upgrade: websocket request offering the subprotocol "+wsProtocol)
		return
	}
	if !offersToken(r.Header, "Sec-WebSocket-Protocol", wsProtocol) {
		s.refuseSubprotocol(w, r)
		return
	}
	if !s.originAllowed(r) {
		s.refuseConn(w, r, transportWS, ReasonForbidden, fmt.Sprintf(
			"origin %q may not open a WebSocket on this server (AllowedOrigins)", trunc(r.Header.Get("Origin"), 100)))
		return
	}
	// A malformed request is refused here, with the 400 every client can
	// read, not after the upgrade: close code 4500 is reserved.
	query, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		s.refuseConn(w, r, transportWS, ReasonBadRequest, fmt.Sprintf("malformed query string: %v", err))
		return
	}
	if !s.acquireSlot() {
		w.Header().Set("Retry-After", "1")
		s.refuseConn(w, r, transportWS, ReasonTooManyConnections, "")
		return
	}
	handedOff := false // to the connection's goroutine, which releases the slot
	defer func() {
		if !handedOff {
			s.releaseSlot()
		}
	}()

	hc := s.upgradeCredentials(r, query)
	if hc.claims != nil && s.users.full(userKey(hc.claims)) {
		s.metrics.limit(limitUserConns)
		w.Header().Set("Retry-After", "1")
		s.refuseConn(w, r, transportWS, s.userLimitReason(), "")
		return
	}

	conn := s.newConn(transportWS, &auth.Claims{}, clientOf(r).remote)
	wc := newWSConn(s, conn, hc)
	hj := &wsHijacker{ResponseWriter: w, maxMessage: int64(s.cfg.MaxMessageSize)}
	ws, err := websocket.Accept(hj, r, &websocket.AcceptOptions{
		Subprotocols:       []string{wsProtocol},
		InsecureSkipVerify: true, // originAllowed has checked the Origin
		OnPingReceived: func(context.Context, []byte) bool {
			wc.touch()
			return true
		},
		OnPongReceived: func(context.Context, []byte) { wc.touch() },
	})
	if err != nil {
		// Accept has answered the request (a broken handshake: 4xx).
		s.metrics.refused(transportWS, ReasonBadRequest)
		s.connLog.Log(slog.LevelDebug, "gateway: websocket upgrade failed",
			slog.String("remote", clientOf(r).remote), slog.String("error", err.Error()))
		conn.Cancel()
		return
	}
	// From here on r.Context() must not be used: the connection is hijacked.
	wc.attach(ws, hj.conn)
	if !s.register(conn) {
		conn.Close(ReasonShutdown, s.reconnectJitter())
	}
	handedOff = true
	go wc.run()
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
	msg += "; this server speaks " + strings.Join(wsProtocols, ", ") + ": offer one in Sec-WebSocket-Protocol"
	s.metrics.refused(transportWS, ReasonBadRequest)
	writeJSON(w, ReasonBadRequest.Status, errorBody{Error: errorDetail{
		Code: ReasonBadRequest.Code, Message: msg, Protocols: wsProtocols,
	}})
}

// upgradeCredentials reads the credential the upgrade request carried. A
// token is verified and admitted (with ExpiryGrace, as connect does) now,
// so authentication is decided before MaxConnectionsPerUser is looked at:
// an expired or revoked token hears token_expired or revoked at connect,
// never a 429. A ticket is only noted: connect redeems it if it relies on
// it, so an upgrade refused for anything, or a connect that brings its own
// token, leaves the ticket unspent.
func (s *Server) upgradeCredentials(r *http.Request, query url.Values) httpCredentials {
	cred, reason, msg := s.requestCredential(r, query)
	hc := httpCredentials{source: cred.source, ticket: cred.ticket, reason: reason, msg: msg}
	if reason.Code == "" && cred.token != "" {
		hc.claims, hc.reason, hc.msg = s.checkToken(cred, s.cfg.ExpiryGrace)
	}
	return hc
}

// httpCredentials is what the upgrade request carried, if anything: the
// claims of its verified and admitted token, a ticket not yet redeemed,
// or why the credential was refused. A connect frame without a token uses
// them.
type httpCredentials struct {
	claims *auth.Claims
	ticket string // redeemed by connect
	source string
	reason Reason // non-empty Code: the credential was refused
	msg    string
}

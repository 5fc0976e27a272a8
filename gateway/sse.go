package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/subscriptions"
)

// sseRequest is a validated SSE request.
type sseRequest struct {
	claims   *auth.Claims
	channels []string
	cursor   cursor // nil: start live
	// subTokens maps a channel to the subscription token sent for it.
	subTokens map[string]string
	// decisions holds each channel's authorization, in channel order.
	decisions []subscriptions.Decision
}

// handleSSE serves GET /v1/sse?channel=C&channel=D.
func (s *Server) handleSSE(w http.ResponseWriter, r *http.Request) {
	if !s.acquireSlot() {
		w.Header().Set("Retry-After", "1")
		s.refused(w, r, ReasonTooManyConnections, "")
		return
	}
	defer s.releaseSlot()

	req, reason, msg := s.parseSSE(r)
	if (reason.Code == ReasonTokenExpired.Code || reason == reasonTicketInvalid) && acceptsEventStream(r) {
		s.expiredStream(w, r, msg)
		return
	}
	if reason.Code != "" {
		s.refused(w, r, reason, msg)
		return
	}
	conn := s.newConn(transportSSE, req.claims, r.RemoteAddr)
	if !s.acquireUser(conn, req.claims) {
		w.Header().Set("Retry-After", "1")
		s.refused(w, r, s.userLimitReason(), "")
		return
	}
	defer s.releaseUser(conn)
	conn.hooks = sseHooks{conn}
	conn.ctlCh = make(chan struct{}, 1)
	if !s.register(conn) {
		s.refused(w, r, ReasonShutdown, "")
		return
	}
	defer s.unregister(conn)
	sink := newSSESink(w)
	conn.setAbort(sink.abort)
	defer func() {
		conn.setAbort(nil)
		// Clear the per-batch deadline: the connection may serve another
		// request after this one.
		_ = sink.setDeadline(time.Time{})
	}()
	defer conn.unsubscribeAll()

	subs, err := s.subscribeSSE(r, conn, req)
	if err != nil && r.Context().Err() != nil {
		conn.Close(ReasonClientClosed, 0)
		return
	}
	if err != nil {
		conn.Close(ReasonServerError, 0)
		s.refused(w, r, ReasonServerError, "cannot subscribe: the broker did not answer")
		s.connLog.Log(slog.LevelError, "gateway: sse subscribe failed",
			slog.Uint64("conn", conn.id), slog.String("error", err.Error()))
		return
	}
	for i, ch := range req.channels {
		conn.track(ch, req.subTokens[ch], req.decisions[i].RecheckAfter)
	}
	s.opened(conn)
	defer s.closed(conn)

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if err := s.startSSE(sink, conn, subs); err != nil {
		conn.Close(writeErrorReason(r.Context(), err), 0)
		return
	}
	conn.writer(r.Context(), sink)
}

// acceptsEventStream reports whether the client asked for an event stream
// (EventSource always sends Accept: text/event-stream).
func acceptsEventStream(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		if strings.Contains(strings.ToLower(v), "text/event-stream") {
			return true
		}
	}
	return false
}

// expiredStream answers an EventSource whose token has expired, or whose
// ticket was used up (EventSource reconnects with the URL it has), with a
// stream holding only "reauth" and "disconnect" (token_expired): a 401
// would stop EventSource for good, while a fresh token or ticket fixes
// this.
func (s *Server) expiredStream(w http.ResponseWriter, r *http.Request, msg string) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	sink := newSSESink(w)
	if sink.setDeadline(time.Now().Add(min(s.cfg.WriteTimeout, finalWriteTimeout))) == nil &&
		sink.retry(s.cfg.SSERetry) == nil &&
		sink.final(withMessage(ReasonTokenExpired, msg), 0) == nil {
		_ = sink.flush()
	}
	_ = sink.setDeadline(time.Time{})
	s.connLog.Log(slog.LevelDebug, "gateway: expired token answered with reauth",
		slog.String("url", redactURL(r.URL)), slog.String("remote", r.RemoteAddr))
}

// parseSSE authenticates and validates the request, and authorizes every
// channel. A refused request yields the reason and a message for the client.
func (s *Server) parseSSE(r *http.Request) (sseRequest, Reason, string) {
	query, queryErr := url.ParseQuery(r.URL.RawQuery)
	claims, source, reason, msg := s.requestClaims(r.Context(), r, query)
	switch {
	case reason.Code != "":
		return sseRequest{}, reason, msg
	case claims == nil:
		return sseRequest{}, ReasonUnauthorized, fmt.Sprintf(
			"no token: send Authorization: Bearer <token>, the %s cookie, a ticket (POST /v1/tickets) or the access_token query parameter", s.cfg.CookieName)
	}
	if reason, msg := s.admit(claims, source, 0); reason.Code != "" {
		return sseRequest{}, reason, msg
	}
	if queryErr != nil {
		return sseRequest{}, ReasonBadRequest, "malformed query string: " + queryErr.Error()
	}
	req := sseRequest{claims: claims}

	seen := map[string]bool{}
	for _, ch := range query["channel"] {
		if seen[ch] {
			continue
		}
		seen[ch] = true
		if err := subscriptions.ValidateChannel(ch); err != nil {
			return sseRequest{}, ReasonBadRequest, err.Error()
		}
		req.channels = append(req.channels, ch)
		if len(req.channels) > s.cfg.MaxSubscriptions {
			return sseRequest{}, ReasonBadRequest, fmt.Sprintf(
				"too many channels: at most %d per stream", s.cfg.MaxSubscriptions)
		}
	}
	if len(req.channels) == 0 {
		return sseRequest{}, ReasonBadRequest, "no channel: name one or more with ?channel=<name>"
	}
	for i, tok := range query["sub_token"] {
		ch, err := subTokenChannel(tok)
		switch {
		case err != nil:
			return sseRequest{}, ReasonBadRequest, fmt.Sprintf("sub_token #%d: %v", i+1, err)
		case !seen[ch]:
			return sseRequest{}, ReasonBadRequest, fmt.Sprintf(
				"sub_token #%d names channel %q, which the request does not name (add &channel=…)", i+1, trunc(ch, 255))
		case req.subTokens[ch] != "":
			return sseRequest{}, ReasonBadRequest, fmt.Sprintf("two sub_token parameters name channel %q", ch)
		}
		if req.subTokens == nil {
			req.subTokens = map[string]string{}
		}
		req.subTokens[ch] = tok
	}

	raw := r.Header.Get("Last-Event-ID")
	if raw == "" {
		raw = query.Get("last_event_id")
	}
	if raw != "" {
		c, err := parseCursor(raw)
		if err != nil {
			return sseRequest{}, ReasonBadRequest, "Last-Event-ID / last_event_id: " + err.Error()
		}
		req.cursor = c
	}

	req.decisions = make([]subscriptions.Decision, 0, len(req.channels))
	for _, ch := range req.channels {
		d, err := s.deps.Authorizer.Authorize(r.Context(), subscriptions.Request{
			Claims: claims, Channel: ch, SubToken: req.subTokens[ch],
		})
		switch {
		case errors.Is(err, subscriptions.ErrInvalidName):
			return sseRequest{}, ReasonBadRequest, err.Error()
		case err != nil:
			s.connLog.Log(slog.LevelError, "gateway: authorize failed",
				slog.String("tenant", claims.Tenant), slog.String("error", err.Error()))
			return sseRequest{}, ReasonServerError, "cannot authorize the subscription now"
		case !d.Allowed:
			msg := d.Reason
			if msg == "" {
				msg = fmt.Sprintf("channel %q is not allowed", ch)
			}
			return sseRequest{}, denialReason(d), msg
		}
		req.decisions = append(req.decisions, d)
	}
	return req, Reason{}, ""
}

// subscribeSSE subscribes conn to every channel, resuming those the cursor
// covers.
func (s *Server) subscribeSSE(r *http.Request, conn *Conn, req sseRequest) ([]subscription, error) {
	subs := make([]subscription, 0, len(req.channels))
	for _, ch := range req.channels {
		var since *fanout.Position
		if pos, ok := req.cursor.lookup(fanout.Key{Tenant: req.claims.Tenant, Channel: ch}); ok {
			since = &pos
		}
		sub, err := conn.subscribe(r.Context(), ch, since)
		if err != nil {
			return nil, fmt.Errorf("gateway: subscribe %q: %w", ch, err)
		}
		subs = append(subs, sub)
	}
	return subs, nil
}

// startSSE writes the head of a stream as one batch: the retry field, a
// subscribed event per channel, then the recovered publications.
func (s *Server) startSSE(sink *sseSink, conn *Conn, subs []subscription) error {
	if err := sink.setDeadline(time.Now().Add(s.cfg.WriteTimeout)); err != nil {
		return err
	}
	if err := sink.retry(s.cfg.SSERetry); err != nil {
		return err
	}
	for _, sub := range subs {
		if err := sink.subscribed(sub, conn.pos); err != nil {
			return err
		}
	}
	for _, sub := range subs {
		if _, err := conn.writeRecovered(sink, sub.pubs); err != nil {
			return err
		}
	}
	return sink.flush()
}

// refused answers a refused request and logs it (rate limited, token-free).
func (s *Server) refused(w http.ResponseWriter, r *http.Request, reason Reason, msg string) {
	refuse(w, reason, msg)
	s.connLog.Log(slog.LevelDebug, "gateway: request refused",
		slog.String("reason", reason.Code),
		slog.Int("status", reason.Status),
		slog.String("url", redactURL(r.URL)),
		slog.String("remote", r.RemoteAddr),
		slog.String("message", msg))
}

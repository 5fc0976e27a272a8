package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/sse"
	"github.com/heraldgw/herald/internal/names"
	"github.com/heraldgw/herald/subscriptions"
)

// sseRequest is a validated SSE request.
type sseRequest struct {
	claims   *auth.Claims
	channels []string
	cursor   sse.Cursor // nil: start live
	// subTokens maps a channel to the subscription token sent for it.
	subTokens map[string]string
	// decisions holds each channel's authorization, in channel order.
	decisions []subscriptions.Decision
}

// parseSSE authenticates and validates the request, and authorizes every
// channel. A refused request yields the reason and a message for the
// client. The order matters:
//
//  1. a token (header, cookie, access_token) is verified and admitted
//     first, so a bad credential is reported as such whatever else is
//     wrong;
//  2. then everything that does not depend on the user: the query
//     string, the channels, the sub_tokens, the cursor;
//  3. only then is a ticket redeemed, which spends it: a malformed request
//     never costs the client its ticket;
//  4. last, the channels are authorized for the user.
func (s *Server) parseSSE(r *http.Request) (sseRequest, session.Reason, string) {
	query, queryErr := url.ParseQuery(r.URL.RawQuery)
	cred, reason, msg := s.requestCredential(r, query)
	switch {
	case reason.Code != "":
		return sseRequest{}, reason, msg
	case cred.none():
		return sseRequest{}, session.ReasonUnauthorized, fmt.Sprintf(
			"no token: send Authorization: Bearer <token>, the %s cookie, a ticket (POST /v1/tickets) or the access_token query parameter", s.cfg.CookieName)
	}
	var claims *auth.Claims
	if cred.token != "" {
		if claims, reason, msg = s.checkToken(cred, 0); reason.Code != "" {
			return sseRequest{}, reason, msg
		}
	}
	if queryErr != nil {
		return sseRequest{}, session.ReasonBadRequest, "malformed query string: " + queryErr.Error()
	}
	req, reason, msg := s.sseQuery(r, query)
	if reason.Code != "" {
		return sseRequest{}, reason, msg
	}
	if cred.ticket != "" {
		if claims, reason, msg = s.redeemTicket(r.Context(), cred.ticket); reason.Code != "" {
			return sseRequest{}, reason, msg
		}
		if reason, msg = s.admit(claims, cred.source, 0); reason.Code != "" {
			return sseRequest{}, reason, msg
		}
	}
	req.claims = claims
	if reason, msg := s.authorizeSSE(r, &req); reason.Code != "" {
		return sseRequest{}, reason, msg
	}
	return req, session.Reason{}, ""
}

// sseQuery validates what the request asks for: its channels, their
// subscription tokens and the resume cursor. Nothing here depends on who
// asks.
func (s *Server) sseQuery(r *http.Request, query url.Values) (sseRequest, session.Reason, string) {
	var req sseRequest
	seen := map[string]bool{}
	for _, ch := range query["channel"] {
		if seen[ch] {
			continue
		}
		seen[ch] = true
		if err := names.ValidateChannel(ch); err != nil {
			return sseRequest{}, session.ReasonBadRequest, err.Error()
		}
		req.channels = append(req.channels, ch)
		if len(req.channels) > s.cfg.MaxSubscriptions {
			s.metrics.limit(session.LimitSubscriptions)
			return sseRequest{}, session.ReasonBadRequest, fmt.Sprintf(
				"too many channels: at most %d per stream", s.cfg.MaxSubscriptions)
		}
	}
	if len(req.channels) == 0 {
		return sseRequest{}, session.ReasonBadRequest, "no channel: name one or more with ?channel=<name>"
	}
	for i, tok := range query["sub_token"] {
		ch, err := subTokenChannel(tok)
		switch {
		case err != nil:
			return sseRequest{}, session.ReasonBadRequest, fmt.Sprintf("sub_token #%d: %v", i+1, err)
		case !seen[ch]:
			return sseRequest{}, session.ReasonBadRequest, fmt.Sprintf(
				"sub_token #%d names channel %q, which the request does not name (add &channel=…)", i+1, trunc(ch, 255))
		case req.subTokens[ch] != "":
			return sseRequest{}, session.ReasonBadRequest, fmt.Sprintf("two sub_token parameters name channel %q", ch)
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
		c, err := sse.ParseCursor(raw)
		if err != nil {
			return sseRequest{}, session.ReasonBadRequest, "Last-Event-ID / last_event_id: " + err.Error()
		}
		req.cursor = c
	}
	return req, session.Reason{}, ""
}

// authorizeSSE authorizes every channel of req for req.claims and records
// the decisions; the first channel refused refuses the whole request.
func (s *Server) authorizeSSE(r *http.Request, req *sseRequest) (session.Reason, string) {
	req.decisions = make([]subscriptions.Decision, 0, len(req.channels))
	for _, ch := range req.channels {
		d, err := s.deps.Authorizer.Authorize(r.Context(), subscriptions.Request{
			Claims: req.claims, Channel: ch, SubToken: req.subTokens[ch],
		})
		switch {
		case errors.Is(err, subscriptions.ErrInvalidName):
			return session.ReasonBadRequest, err.Error()
		case err != nil:
			s.connLog.Log(slog.LevelError, "gateway: authorize failed",
				slog.String("tenant", req.claims.Tenant), slog.String("error", err.Error()))
			return session.ReasonServerError, "cannot authorize the subscription now"
		case !d.Allowed:
			msg := d.Reason
			if msg == "" {
				msg = fmt.Sprintf("channel %q is not allowed", ch)
			}
			return session.DenialReason(d), msg
		}
		req.decisions = append(req.decisions, d)
	}
	return session.Reason{}, ""
}

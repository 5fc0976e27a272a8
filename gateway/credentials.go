package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/heraldgw/herald/auth"
)

// Token sources, for logs and errors (never the token itself).
const (
	sourceHeader = "authorization header"
	sourceCookie = "cookie"
	sourceQuery  = "access_token query parameter"
	sourceTicket = "ticket"
	sourceFrame  = "connect frame"
)

// reasonTicketInvalid refuses an unknown, expired or used ticket. A fresh
// ticket fixes it, so an EventSource gets reauth instead of a 401.
var reasonTicketInvalid = withMessage(ReasonUnauthorized,
	"the ticket is unknown, expired or already used: tickets are single-use, fetch a new one (POST /v1/tickets)")

var errAccessTokenQueryOff = errors.New("the access_token query parameter is disabled on this server; send Authorization: Bearer or the cookie")

// headerCredentials finds a token in the Authorization header, then the
// cookie. An empty token with a nil error means none was presented.
func (s *Server) headerCredentials(r *http.Request) (token, source string, err error) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
			return "", sourceHeader, errors.New("the Authorization header must be \"Bearer <token>\"")
		}
		return strings.TrimSpace(tok), sourceHeader, nil
	}
	if c, cerr := r.Cookie(s.cfg.CookieName); cerr == nil && c.Value != "" {
		return c.Value, sourceCookie, nil
	}
	return "", "", nil
}

// requestClaims authenticates a request to /v1/sse or /v1/ws from, in
// order: the Authorization header, the cookie, a single-use ticket, the
// access_token query parameter (when allowed). A refusal is a non-empty
// Reason and a message for the client; no credential at all is nil claims
// with an empty Reason. The claims are verified but not yet checked
// against expiry and revocation (admit does that).
func (s *Server) requestClaims(ctx context.Context, r *http.Request, query url.Values) (*auth.Claims, string, Reason, string) {
	token, source, err := s.headerCredentials(r)
	if err != nil {
		return nil, source, ReasonUnauthorized, err.Error()
	}
	if token == "" {
		if t := query.Get("ticket"); t != "" {
			c, reason, msg := s.redeemTicket(ctx, t)
			return c, sourceTicket, reason, msg
		}
		if tok := query.Get("access_token"); tok != "" {
			if s.cfg.DisableAccessTokenQuery {
				return nil, sourceQuery, ReasonUnauthorized, errAccessTokenQueryOff.Error()
			}
			token, source = tok, sourceQuery
		}
	}
	if token == "" {
		return nil, "", Reason{}, ""
	}
	c, reason, msg := s.verifyToken(token, source)
	return c, source, reason, msg
}

// verifyToken verifies a connection token from source.
func (s *Server) verifyToken(token, source string) (*auth.Claims, Reason, string) {
	claims, err := s.deps.Verifier.Verify(token)
	switch {
	case errors.Is(err, auth.ErrExpired):
		return nil, ReasonTokenExpired, "token expired (" + source + "): fetch a fresh one"
	case err != nil:
		return nil, ReasonUnauthorized, "token from " + source + " does not verify: " + err.Error()
	}
	return claims, Reason{}, ""
}

// redeemTicket exchanges a ticket for the claims it was issued for.
func (s *Server) redeemTicket(ctx context.Context, ticket string) (*auth.Claims, Reason, string) {
	if s.deps.Tickets == nil {
		return nil, ReasonUnauthorized, "tickets are not enabled on this server"
	}
	c, err := s.deps.Tickets.Redeem(ctx, ticket)
	switch {
	case errors.Is(err, auth.ErrInvalidTicket):
		s.metrics.tickets.WithLabelValues(ticketInvalid).Inc()
		return nil, reasonTicketInvalid, reasonTicketInvalid.Message
	case err != nil:
		s.metrics.tickets.WithLabelValues(ticketFailed).Inc()
		s.connLog.Log(slog.LevelError, "gateway: ticket redemption failed", slog.String("error", err.Error()))
		return nil, ReasonServerError, "cannot redeem the ticket now; retry later"
	}
	s.metrics.tickets.WithLabelValues(ticketRedeemed).Inc()
	return c, Reason{}, ""
}

// admit checks verified claims at the moment they open a connection or
// replace its token: not expired more than slack ago, and not revoked per
// the last revocation snapshot.
func (s *Server) admit(c *auth.Claims, source string, slack time.Duration) (Reason, string) {
	if !c.ExpiresAt.IsZero() && !time.Now().Before(c.ExpiresAt.Add(slack)) {
		return ReasonTokenExpired, "token expired (" + source + "): fetch a fresh one"
	}
	if s.reval.revoked(c) {
		return ReasonRevoked, fmt.Sprintf("the token (%s) or its session was revoked: sign in again", source)
	}
	return Reason{}, ""
}

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
	"github.com/heraldgw/herald/gateway/internal/session"
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
var reasonTicketInvalid = session.WithMessage(session.ReasonUnauthorized,
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

// credential is what a request to /v1/sse or /v1/ws presented: a token
// and where it came from, or a ticket (source sourceTicket), or nothing
// (all empty).
type credential struct {
	token, ticket, source string
}

// none reports whether the request presented no credential.
func (c credential) none() bool { return c.token == "" && c.ticket == "" }

// requestCredential finds the credential of a request to /v1/sse or
// /v1/ws, first found wins: the Authorization header, the cookie, a
// single-use ticket, the access_token query parameter (when allowed). It
// neither verifies a token nor redeems a ticket, so the caller can refuse
// a bad request before spending a ticket on it. A refusal is a non-empty
// Reason and a message for the client.
func (s *Server) requestCredential(r *http.Request, query url.Values) (credential, session.Reason, string) {
	token, source, err := s.headerCredentials(r)
	switch {
	case err != nil:
		return credential{source: source}, session.ReasonUnauthorized, err.Error()
	case token != "":
		return credential{token: token, source: source}, session.Reason{}, ""
	}
	if t := query.Get("ticket"); t != "" {
		return credential{ticket: t, source: sourceTicket}, session.Reason{}, ""
	}
	if tok := query.Get("access_token"); tok != "" {
		if s.cfg.DisableAccessTokenQuery {
			return credential{source: sourceQuery}, session.ReasonUnauthorized, errAccessTokenQueryOff.Error()
		}
		return credential{token: tok, source: sourceQuery}, session.Reason{}, ""
	}
	return credential{}, session.Reason{}, ""
}

// checkToken verifies a token credential and admits its claims (expiry
// with slack, revocation). Authentication is decided here, before any
// bound that depends on the user is looked at: a revoked or expired token
// must hear so, not "too many connections".
func (s *Server) checkToken(c credential, slack time.Duration) (*auth.Claims, session.Reason, string) {
	claims, reason, msg := s.verifyToken(c.token, c.source)
	if reason.Code == "" {
		reason, msg = s.admit(claims, c.source, slack)
	}
	if reason.Code != "" {
		return nil, reason, msg
	}
	return claims, session.Reason{}, ""
}

// verifyToken verifies a connection token from source.
func (s *Server) verifyToken(token, source string) (*auth.Claims, session.Reason, string) {
	claims, err := s.deps.Verifier.Verify(token)
	switch {
	case errors.Is(err, auth.ErrExpired):
		return nil, session.ReasonTokenExpired, "token expired (" + source + "): fetch a fresh one"
	case err != nil:
		return nil, session.ReasonUnauthorized, "token from " + source + " does not verify: " + err.Error()
	}
	return claims, session.Reason{}, ""
}

// redeemTicket exchanges a ticket for the claims it was issued for, and
// so spends it: the ticket stores can neither peek at a ticket nor take
// one back. Callers redeem only once every check that does not depend on
// the ticket's user has passed.
func (s *Server) redeemTicket(ctx context.Context, ticket string) (*auth.Claims, session.Reason, string) {
	if s.deps.Tickets == nil {
		return nil, session.ReasonUnauthorized, "tickets are not enabled on this server"
	}
	c, err := s.deps.Tickets.Redeem(ctx, ticket)
	switch {
	case errors.Is(err, auth.ErrInvalidTicket):
		s.metrics.tickets.WithLabelValues(ticketInvalid).Inc()
		return nil, reasonTicketInvalid, reasonTicketInvalid.Message
	case err != nil:
		s.metrics.tickets.WithLabelValues(ticketFailed).Inc()
		s.connLog.Log(slog.LevelError, "gateway: ticket redemption failed", slog.String("error", err.Error()))
		return nil, session.ReasonServerError, "cannot redeem the ticket now; retry later"
	}
	s.metrics.tickets.WithLabelValues(ticketRedeemed).Inc()
	return c, session.Reason{}, ""
}

// admit checks verified claims at the moment they open a connection or
// replace its token: not expired more than slack ago, and not revoked per
// the last revocation snapshot.
func (s *Server) admit(c *auth.Claims, source string, slack time.Duration) (session.Reason, string) {
	if !c.ExpiresAt.IsZero() && !time.Now().Before(c.ExpiresAt.Add(slack)) {
		return session.ReasonTokenExpired, "token expired (" + source + "): fetch a fresh one"
	}
	if s.reval.revoked(c) {
		return session.ReasonRevoked, fmt.Sprintf("the token (%s) or its session was revoked: sign in again", source)
	}
	return session.Reason{}, ""
}

package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/gateway/internal/session"
)

// ticketResponse is the answer of POST /v1/tickets.
type ticketResponse struct {
	// Ticket goes in ?ticket= of /v1/sse or /v1/ws; it is redeemable once.
	Ticket string `json:"ticket"`
	// ExpiresIn is how many whole seconds the ticket stays redeemable.
	ExpiresIn int64 `json:"expires_in"`
}

// ticketTTL is the lifetime the ticket store gives tickets: its TTL()
// when it has one, else auth's default.
func (s *Server) ticketTTL() time.Duration {
	if t, ok := s.deps.Tickets.(interface{ TTL() time.Duration }); ok {
		return t.TTL()
	}
	return auth.DefaultTicketTTL
}

// ticketsPerUserMessage explains a ticket refused at the per-user bound.
func (s *Server) ticketsPerUserMessage() string {
	limit := ""
	if t, ok := s.deps.Tickets.(interface{ MaxPerUser() int }); ok {
		limit = fmt.Sprintf(" (%d)", t.MaxPerUser())
	}
	return fmt.Sprintf("this user holds the most live tickets allowed, --max-tickets-per-user%s: redeem them, or retry once they expire (at most %s)",
		limit, s.ticketTTL())
}

// handleTickets serves POST /v1/tickets: it exchanges the bearer token
// (Authorization header or cookie, never the URL) for a single-use ticket
// that lives seconds, bound to the token's tenant, subject and grants, so
// an EventSource can authenticate without a long-lived token in its URL.
func (s *Server) handleTickets(w http.ResponseWriter, r *http.Request) {
	if s.deps.Tickets == nil {
		// Only this answer tells a browser client it may fall back to
		// access_token: a proxy's 404 does not.
		writeError(w, http.StatusNotFound, "tickets_disabled", "tickets are not enabled on this server: put the token in access_token instead")
		return
	}
	refuse := func(reason session.Reason, msg string) {
		s.metrics.tickets.WithLabelValues(ticketRefused).Inc()
		s.refused(w, r, reason, msg)
	}
	token, source, err := s.headerCredentials(r)
	switch {
	case err != nil:
		refuse(session.ReasonUnauthorized, err.Error())
		return
	case token == "":
		refuse(session.ReasonUnauthorized, fmt.Sprintf(
			"no token: send Authorization: Bearer <token> or the %s cookie (a token in the URL is not accepted here)", s.cfg.CookieName))
		return
	}
	claims, reason, msg := s.verifyToken(token, source)
	if reason.Code == "" {
		reason, msg = s.admit(claims, source, 0)
	}
	if reason.Code != "" {
		refuse(reason, msg)
		return
	}
	ticket, err := s.deps.Tickets.Issue(r.Context(), claims)
	if err != nil {
		if errors.Is(err, auth.ErrTooManyTickets) {
			s.metrics.tickets.WithLabelValues(ticketRefused).Inc()
			s.metrics.limit(limitUserTickets)
			w.Header().Set("Retry-After", strconv.Itoa(int(max(time.Second, s.ticketTTL()).Seconds())))
			writeError(w, http.StatusTooManyRequests, session.ReasonTooManyRequests.Code, s.ticketsPerUserMessage())
			return
		}
		s.metrics.tickets.WithLabelValues(ticketFailed).Inc()
		if errors.Is(err, auth.ErrTicketsFull) {
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, session.ReasonServerError.Code, "too many live tickets; retry shortly")
			return
		}
		s.connLog.Log(slog.LevelError, "gateway: ticket issue failed",
			slog.String("tenant", claims.Tenant), slog.String("error", err.Error()))
		writeError(w, http.StatusInternalServerError, session.ReasonServerError.Code, "cannot issue a ticket now; retry later")
		return
	}
	s.metrics.tickets.WithLabelValues(ticketIssued).Inc()
	life := min(s.ticketTTL(), time.Until(claims.ExpiresAt))
	writeJSON(w, http.StatusOK, ticketResponse{Ticket: ticket, ExpiresIn: max(0, int64(life/time.Second))})
}

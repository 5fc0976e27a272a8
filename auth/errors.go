package auth

import (
	"errors"

	"github.com/heraldgw/herald/internal/lifecycle"
)

var (
	// ErrInvalidToken wraps every verification failure; the message after it
	// names the check that failed and never contains the token.
	ErrInvalidToken = errors.New("invalid token")
	// ErrExpired is wrapped (with ErrInvalidToken) when exp has passed.
	ErrExpired = errors.New("token expired")
	// ErrNoKey means no key source is configured or no key matched.
	ErrNoKey = errors.New("no verification key")

	// ErrInvalidTicket wraps every ticket redemption failure.
	ErrInvalidTicket = errors.New("invalid ticket")
	// ErrTicketUsed is wrapped (with ErrInvalidTicket) when a ticket was
	// already redeemed.
	ErrTicketUsed = errors.New("ticket already used")
	// ErrTicketUnknown is wrapped (with ErrInvalidTicket) when a ticket was
	// never issued, is malformed, or has expired.
	ErrTicketUnknown = errors.New("ticket unknown or expired")
	// ErrTicketsFull means the in-memory ticket store holds its maximum of
	// live tickets.
	ErrTicketsFull = errors.New("too many live tickets")
	// ErrTooManyTickets means the user (tenant and subject) holds
	// TicketConfig.MaxPerUser live tickets already.
	ErrTooManyTickets = errors.New("too many live tickets for this user")

	// ErrInvalidRevocation wraps every rejected Revocation.
	ErrInvalidRevocation = errors.New("invalid revocation")

	// ErrStarted is wrapped by a second Verifier.Start.
	ErrStarted = lifecycle.ErrStarted
	// ErrStopped is wrapped by Verifier.Start after Stop.
	ErrStopped = lifecycle.ErrStopped
)

// trunc keeps error messages short when input is hostile or huge.
func trunc(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

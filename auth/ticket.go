package auth

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"slices"
	"time"
)

// DefaultTicketTTL is how long a ticket lives when TicketConfig.TTL is 0.
const DefaultTicketTTL = 30 * time.Second

// DefaultMaxTickets bounds the live tickets of a MemoryTickets.
const DefaultMaxTickets = 100_000

// DefaultMaxTicketsPerUser bounds the live tickets of one user (tenant and
// subject) in either store.
const DefaultMaxTicketsPerUser = 100

// ticketBytes is the random length of a ticket; its text is the unpadded
// base64url encoding (43 characters).
const (
	ticketBytes = 32
	ticketLen   = 43
)

// TicketIssuer exchanges verified claims for a short-lived, single-use
// opaque ticket that an EventSource can put in its URL instead
// of the long-lived token. Implementations: MemoryTickets (one node) and
// RedisTickets (any node can redeem).
type TicketIssuer interface {
	// Issue returns a new ticket bound to c. It lives TicketConfig.TTL, or
	// until c expires if that is sooner. It fails with ErrTooManyTickets
	// when c's user holds TicketConfig.MaxPerUser live tickets.
	Issue(ctx context.Context, c *Claims) (string, error)
	// Redeem returns the claims bound to ticket and uses it up. A second
	// redemption fails with ErrTicketUsed; an unknown, malformed or expired
	// ticket fails with ErrTicketUnknown; both wrap ErrInvalidTicket.
	Redeem(ctx context.Context, ticket string) (*Claims, error)
}

// TicketConfig configures a ticket store.
type TicketConfig struct {
	// TTL is how long a ticket stays redeemable. Default 30s
	// (DefaultTicketTTL); at most 5m.
	TTL time.Duration
	// MaxTickets bounds the live (and recently used) tickets kept by
	// MemoryTickets; Issue fails with ErrTicketsFull beyond it. Default
	// 100000. RedisTickets ignores it.
	MaxTickets int
	// MaxPerUser bounds the live tickets (issued, neither redeemed nor
	// expired) of one user, a tenant and subject, whatever addresses
	// ask for them; Issue fails with ErrTooManyTickets beyond it, so one
	// user cannot take every ticket of a node. Both stores. Default 100
	// (DefaultMaxTicketsPerUser).
	MaxPerUser int
	// Prefix prefixes RedisTickets keys. Default "herald:".
	// MemoryTickets ignores it.
	Prefix string
	// Now is the clock of MemoryTickets. Default time.Now.
	Now func() time.Time
}

func (c TicketConfig) withDefaults() TicketConfig {
	c.TTL = cmp.Or(c.TTL, DefaultTicketTTL)
	c.MaxTickets = cmp.Or(c.MaxTickets, DefaultMaxTickets)
	c.MaxPerUser = cmp.Or(c.MaxPerUser, DefaultMaxTicketsPerUser)
	c.Prefix = cmp.Or(c.Prefix, DefaultRedisPrefix)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c TicketConfig) validate() error {
	if c.TTL < time.Millisecond || c.TTL > 5*time.Minute {
		return fmt.Errorf("auth: ticket config: TTL %s is outside 1ms..5m", c.TTL)
	}
	if c.MaxTickets < 1 {
		return fmt.Errorf("auth: ticket config: MaxTickets must be positive, got %d", c.MaxTickets)
	}
	if c.MaxPerUser < 1 {
		return fmt.Errorf("auth: ticket config: MaxPerUser must be positive, got %d", c.MaxPerUser)
	}
	return nil
}

// newTicket returns a fresh random ticket and the key it is stored under
// (ticketKey).
func newTicket() (ticket, key string, err error) {
	var b [ticketBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("auth: issue ticket: %w", err)
	}
	ticket = base64.RawURLEncoding.EncodeToString(b[:])
	key, err = ticketKey(ticket)
	return ticket, key, err
}

// ticketKey checks the shape of ticket and returns the hex SHA-256 under
// which it is stored, so stored keys are not redeemable tickets.
func ticketKey(ticket string) (string, error) {
	if len(ticket) != ticketLen {
		return "", fmt.Errorf("auth: redeem ticket: %w: %w", ErrInvalidTicket, ErrTicketUnknown)
	}
	if _, err := base64.RawURLEncoding.Strict().DecodeString(ticket); err != nil {
		return "", fmt.Errorf("auth: redeem ticket: %w: %w", ErrInvalidTicket, ErrTicketUnknown)
	}
	sum := sha256.Sum256([]byte(ticket))
	return hex.EncodeToString(sum[:]), nil
}

// ticketLifetime is the TTL of a ticket for c at now, or an error when c
// cannot back a ticket.
func ticketLifetime(c *Claims, ttl time.Duration, now time.Time) (time.Duration, error) {
	if c == nil || c.Subject == "" || c.Tenant == "" {
		return 0, fmt.Errorf("auth: issue ticket: claims need sub and tenant")
	}
	if c.Channel != "" {
		return 0, fmt.Errorf("auth: issue ticket: a subscription token cannot be exchanged for a ticket")
	}
	left := c.ExpiresAt.Sub(now)
	if c.ExpiresAt.IsZero() || left <= 0 {
		return 0, fmt.Errorf("auth: issue ticket: %w: %w", ErrInvalidToken, ErrExpired)
	}
	return min(ttl, left), nil
}

// ticketUser is the key of c's user (tenant and subject) in the per-user
// bound: a fixed-length hash, so a long subject costs no more than a short
// one.
func ticketUser(c *Claims) string {
	h := sha256.New()
	h.Write([]byte(c.Tenant))
	h.Write([]byte{0})
	h.Write([]byte(c.Subject))
	return hex.EncodeToString(h.Sum(nil))
}

// tooManyTickets is the error of an Issue over MaxPerUser.
func tooManyTickets(limit int) error {
	return fmt.Errorf("auth: issue ticket: %w (%d, TicketConfig.MaxPerUser)", ErrTooManyTickets, limit)
}

// cloneClaims deep-copies c so a ticket's holder cannot change another's.
func cloneClaims(c *Claims) *Claims {
	cp := *c
	cp.Subscribe = slices.Clone(c.Subscribe)
	cp.Publish = slices.Clone(c.Publish)
	return &cp
}

// ticketClaims is the stored JSON shape of the claims behind a ticket.
// RedisTickets stores the grant lists apart, named by Grants.
type ticketClaims struct {
	Subject   string   `json:"sub"`
	Tenant    string   `json:"tenant"`
	Subscribe []string `json:"subscribe,omitempty"`
	Publish   []string `json:"publish,omitempty"`
	Grants    string   `json:"grants,omitempty"` // the id of the stored grant lists
	SessionID string   `json:"sid,omitempty"`
	TokenID   string   `json:"jti,omitempty"`
	ExpiresAt int64    `json:"exp_ms"`
	IssuedAt  int64    `json:"iat_ms,omitempty"`
}

func newTicketClaims(c *Claims) ticketClaims {
	tc := ticketClaims{
		Subject: c.Subject, Tenant: c.Tenant, Subscribe: c.Subscribe, Publish: c.Publish,
		SessionID: c.SessionID, TokenID: c.TokenID, ExpiresAt: c.ExpiresAt.UnixMilli(),
	}
	if !c.IssuedAt.IsZero() {
		tc.IssuedAt = c.IssuedAt.UnixMilli()
	}
	return tc
}

func (tc *ticketClaims) claims() *Claims {
	c := &Claims{
		Subject: tc.Subject, Tenant: tc.Tenant, Subscribe: tc.Subscribe, Publish: tc.Publish,
		SessionID: tc.SessionID, TokenID: tc.TokenID, ExpiresAt: time.UnixMilli(tc.ExpiresAt),
	}
	if tc.IssuedAt != 0 {
		c.IssuedAt = time.UnixMilli(tc.IssuedAt)
	}
	return c
}

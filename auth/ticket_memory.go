package auth

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// MemoryTickets is a TicketIssuer held in process memory: a ticket can be
// redeemed only on the node that issued it. It keeps at most MaxTickets
// entries, and at most MaxPerUser live ones per user; expired ones are
// swept, oldest first, on every call.
type MemoryTickets struct {
	cfg TicketConfig

	mu      sync.Mutex
	entries map[string]*memTicket
	order   []memTicketRef // issue order; expiries are nearly sorted
	head    int
	live    map[string]int // per user (ticketUser): tickets neither redeemed nor swept
}

type memTicket struct {
	claims *Claims
	user   string
	exp    time.Time
	used   bool
}

type memTicketRef struct {
	key string
	exp time.Time
}

// NewMemoryTickets validates cfg and returns an empty store.
func NewMemoryTickets(cfg TicketConfig) (*MemoryTickets, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &MemoryTickets{cfg: cfg, entries: map[string]*memTicket{}, live: map[string]int{}}, nil
}

// Issue returns a new ticket bound to a copy of c.
func (s *MemoryTickets) Issue(_ context.Context, c *Claims) (string, error) {
	now := s.cfg.Now()
	ttl, err := ticketLifetime(c, s.cfg.TTL, now)
	if err != nil {
		return "", err
	}
	ticket, key, err := newTicket()
	if err != nil {
		return "", err
	}
	exp, user := now.Add(ttl), ticketUser(c)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(now)
	if s.live[user] >= s.cfg.MaxPerUser {
		return "", tooManyTickets(s.cfg.MaxPerUser)
	}
	if len(s.entries) >= s.cfg.MaxTickets {
		return "", fmt.Errorf("auth: issue ticket: %w (%d)", ErrTicketsFull, s.cfg.MaxTickets)
	}
	s.entries[key] = &memTicket{claims: cloneClaims(c), user: user, exp: exp}
	s.live[user]++
	s.order = append(s.order, memTicketRef{key: key, exp: exp})
	return ticket, nil
}

// Redeem returns the claims bound to ticket and uses it up.
func (s *MemoryTickets) Redeem(_ context.Context, ticket string) (*Claims, error) {
	key, err := ticketKey(ticket)
	if err != nil {
		return nil, err
	}
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(now)
	e, ok := s.entries[key]
	switch {
	case !ok || !now.Before(e.exp):
		return nil, fmt.Errorf("auth: redeem ticket: %w: %w", ErrInvalidTicket, ErrTicketUnknown)
	case e.used:
		return nil, fmt.Errorf("auth: redeem ticket: %w: %w", ErrInvalidTicket, ErrTicketUsed)
	}
	e.used = true
	s.release(e.user)
	c := e.claims
	e.claims = nil
	return c, nil
}

// Len is the number of tickets held (live or used, not yet swept).
func (s *MemoryTickets) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

// sweepLocked drops expired tickets from the front of the issue order. A
// ticket cut short by its token's exp may wait behind a longer-lived one
// until that expires; Redeem checks expiry itself, so this only delays
// freeing memory by at most one TTL.
func (s *MemoryTickets) sweepLocked(now time.Time) {
	for s.head < len(s.order) && !now.Before(s.order[s.head].exp) {
		if e := s.entries[s.order[s.head].key]; e != nil && !e.used {
			s.release(e.user)
		}
		delete(s.entries, s.order[s.head].key)
		s.order[s.head] = memTicketRef{}
		s.head++
	}
	if s.head > 0 && s.head*2 >= len(s.order) {
		n := copy(s.order, s.order[s.head:])
		clear(s.order[n:])
		s.order = s.order[:n]
		s.head = 0
	}
}

// release takes one live ticket off user's count.
func (s *MemoryTickets) release(user string) {
	if n := s.live[user] - 1; n > 0 {
		s.live[user] = n
	} else {
		delete(s.live, user)
	}
}

// TTL is the longest a ticket issued by s lives.
func (s *MemoryTickets) TTL() time.Duration { return s.cfg.TTL }

// MaxPerUser is the most live tickets one user may hold.
func (s *MemoryTickets) MaxPerUser() int { return s.cfg.MaxPerUser }

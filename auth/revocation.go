package auth

import (
	"context"
	"fmt"
	"time"
)

// MaxRevocationIDLen bounds SessionID and TokenID in a Revocation.
const MaxRevocationIDLen = 256

// MaxRevocationReasonLen bounds Revocation.Reason.
const MaxRevocationReasonLen = 512

// Revocation cuts every token carrying a session id (sid) or a token id
// (jti) until a time. Exactly one of SessionID and TokenID is set.
type Revocation struct {
	// SessionID revokes every token whose sid equals it.
	SessionID string
	// TokenID revokes the token whose jti equals it.
	TokenID string
	// Until is when the revocation may be forgotten: the latest exp of any
	// token it must stop. Revoking again keeps the later Until.
	Until time.Time
	// Reason is free text for operators (herald revoke --reason).
	Reason string
	// CreatedAt is set by the store when the revocation was first
	// recorded; it is ignored by Revoke.
	CreatedAt time.Time
}

// RevocationStore records revocations and answers whether claims are
// revoked. Implementations: PostgresRevocations, SQLiteRevocations,
// RedisRevocations, MemoryRevocations, and MirroredRevocations over
// several of them. Revocations whose Until has passed
// are never reported and are deleted by Prune (each store also prunes
// while recording a revocation).
type RevocationStore interface {
	// Revoke records r; revoking the same id again extends Until and
	// replaces Reason.
	Revoke(ctx context.Context, r Revocation) error
	// IsRevoked reports whether c's sid or jti is revoked now.
	IsRevoked(ctx context.Context, c *Claims) (bool, error)
	// List returns every live revocation, by CreatedAt then id.
	List(ctx context.Context) ([]Revocation, error)
	// Snapshot returns every live revocation in one query, for checking
	// many connections at once on the revalidation timer.
	Snapshot(ctx context.Context) (*RevocationSet, error)
	// Prune deletes revocations whose Until has passed and says how many.
	Prune(ctx context.Context) (int, error)
}

// RevocationSet is a point-in-time copy of the live revocations. The zero
// value and nil are empty sets. It is read-only and safe to share.
type RevocationSet struct {
	sessions map[string]time.Time
	tokens   map[string]time.Time
}

func newRevocationSet() *RevocationSet {
	return &RevocationSet{sessions: map[string]time.Time{}, tokens: map[string]time.Time{}}
}

func (s *RevocationSet) add(kind, id string, until time.Time) {
	m := s.tokens
	if kind == kindSession {
		m = s.sessions
	}
	if cur, ok := m[id]; !ok || until.After(cur) {
		m[id] = until
	}
}

// Revoked reports whether c's sid or jti is in the set with an Until
// still ahead.
func (s *RevocationSet) Revoked(c *Claims) bool {
	if s == nil || c == nil {
		return false
	}
	now := time.Now()
	if c.SessionID != "" {
		if u, ok := s.sessions[c.SessionID]; ok && now.Before(u) {
			return true
		}
	}
	if c.TokenID != "" {
		if u, ok := s.tokens[c.TokenID]; ok && now.Before(u) {
			return true
		}
	}
	return false
}

// Len is the number of revocations in the set.
func (s *RevocationSet) Len() int {
	if s == nil {
		return 0
	}
	return len(s.sessions) + len(s.tokens)
}

// Stored kinds of revocation.
const (
	kindSession = "sid"
	kindToken   = "jti"
)

// key validates r and returns its stored kind and id.
func (r Revocation) key() (kind, id string, err error) {
	switch {
	case r.SessionID != "" && r.TokenID != "":
		return "", "", fmt.Errorf("%w: set SessionID or TokenID, not both", ErrInvalidRevocation)
	case r.SessionID == "" && r.TokenID == "":
		return "", "", fmt.Errorf("%w: SessionID or TokenID is required", ErrInvalidRevocation)
	case r.Until.IsZero():
		return "", "", fmt.Errorf("%w: Until is required (the latest exp of the tokens to stop)", ErrInvalidRevocation)
	case len(r.Reason) > MaxRevocationReasonLen:
		return "", "", fmt.Errorf("%w: Reason longer than %d bytes", ErrInvalidRevocation, MaxRevocationReasonLen)
	}
	kind, id = kindSession, r.SessionID
	if id == "" {
		kind, id = kindToken, r.TokenID
	}
	if len(id) > MaxRevocationIDLen {
		return "", "", fmt.Errorf("%w: id longer than %d bytes", ErrInvalidRevocation, MaxRevocationIDLen)
	}
	return kind, id, nil
}

// revocationOf builds a Revocation from a stored row.
func revocationOf(kind, id string, until time.Time, reason string, created time.Time) Revocation {
	r := Revocation{Until: until, Reason: reason, CreatedAt: created}
	if kind == kindSession {
		r.SessionID = id
	} else {
		r.TokenID = id
	}
	return r
}

func wrapRevoke(err error) error { return fmt.Errorf("auth: revoke: %w", err) }

// claimIDs returns the ids of c to look up; empty strings are skipped.
func claimIDs(c *Claims) (sid, jti string) {
	if c == nil {
		return "", ""
	}
	return c.SessionID, c.TokenID
}

// lookUpRevoked is IsRevoked of a database store: query reports whether
// sid or jti is revoked now; claims with neither are not looked up.
func lookUpRevoked(c *Claims, query func(sid, jti string) (bool, error)) (bool, error) {
	sid, jti := claimIDs(c)
	if sid == "" && jti == "" {
		return false, nil
	}
	revoked, err := query(sid, jti)
	if err != nil {
		return false, fmt.Errorf("auth: is revoked: %w", err)
	}
	return revoked, nil
}

// The stores implement RevocationStore; the ticket stores TicketIssuer.
var (
	_ RevocationStore = (*MemoryRevocations)(nil)
	_ RevocationStore = (*PostgresRevocations)(nil)
	_ RevocationStore = (*SQLiteRevocations)(nil)
	_ RevocationStore = (*RedisRevocations)(nil)
	_ TicketIssuer    = (*MemoryTickets)(nil)
	_ TicketIssuer    = (*RedisTickets)(nil)
)

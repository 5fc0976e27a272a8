package auth

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"
)

// MemoryRevocations is a RevocationStore held in process memory, for tests
// and single-node development; revocations are lost on restart.
type MemoryRevocations struct {
	mu   sync.Mutex
	rows map[[2]string]Revocation // [kind, id]
	now  func() time.Time
}

// NewMemoryRevocations returns an empty store.
func NewMemoryRevocations() *MemoryRevocations {
	return &MemoryRevocations{rows: map[[2]string]Revocation{}, now: time.Now}
}

// Revoke records r (see RevocationStore).
func (s *MemoryRevocations) Revoke(_ context.Context, r Revocation) error {
	kind, id, err := r.key()
	if err != nil {
		return wrapRevoke(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.pruneLocked(now)
	k := [2]string{kind, id}
	if cur, ok := s.rows[k]; ok {
		if cur.Until.After(r.Until) {
			r.Until = cur.Until
		}
		r.CreatedAt = cur.CreatedAt
	} else {
		r.CreatedAt = now
	}
	s.rows[k] = revocationOf(kind, id, r.Until, r.Reason, r.CreatedAt)
	return nil
}

// IsRevoked reports whether c's sid or jti is revoked now.
func (s *MemoryRevocations) IsRevoked(_ context.Context, c *Claims) (bool, error) {
	sid, jti := claimIDs(c)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if r, ok := s.rows[[2]string{kindSession, sid}]; ok && sid != "" && now.Before(r.Until) {
		return true, nil
	}
	if r, ok := s.rows[[2]string{kindToken, jti}]; ok && jti != "" && now.Before(r.Until) {
		return true, nil
	}
	return false, nil
}

// List returns the live revocations by CreatedAt then id.
func (s *MemoryRevocations) List(_ context.Context) ([]Revocation, error) {
	s.mu.Lock()
	now := s.now()
	out := make([]Revocation, 0, len(s.rows))
	for _, r := range s.rows {
		if now.Before(r.Until) {
			out = append(out, r)
		}
	}
	s.mu.Unlock()
	sortRevocations(out)
	return out, nil
}

// Snapshot returns the live revocations.
func (s *MemoryRevocations) Snapshot(_ context.Context) (*RevocationSet, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	set := newRevocationSet()
	for k, r := range s.rows {
		if now.Before(r.Until) {
			set.add(k[0], k[1], r.Until)
		}
	}
	return set, nil
}

// Prune deletes revocations whose Until has passed.
func (s *MemoryRevocations) Prune(_ context.Context) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pruneLocked(s.now()), nil
}

func (s *MemoryRevocations) pruneLocked(now time.Time) int {
	n := 0
	for k, r := range s.rows {
		if !now.Before(r.Until) {
			delete(s.rows, k)
			n++
		}
	}
	return n
}

// sortRevocations orders by CreatedAt, then sessions before tokens, then id.
func sortRevocations(rs []Revocation) {
	rank := func(r Revocation) (int, string) {
		if r.SessionID != "" {
			return 0, r.SessionID
		}
		return 1, r.TokenID
	}
	slices.SortFunc(rs, func(a, b Revocation) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		ra, ia := rank(a)
		rb, ib := rank(b)
		if ra != rb {
			return ra - rb
		}
		return strings.Compare(ia, ib)
	})
}

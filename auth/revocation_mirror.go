package auth

import (
	"context"
	"errors"
	"fmt"
)

// MirroredRevocations keeps every revocation in several stores and counts
// one as soon as any store holds it. Herald uses it to keep revocations
// in Redis and in the outbox database together: Redis can lose its data
// (a restart without persistence, eviction under an allkeys-* policy),
// and a revocation lost there must not let a revoked session back in.
type MirroredRevocations struct {
	stores []RevocationStore
}

// NewMirroredRevocations returns a store over stores, which it does not
// own; revocations are written to them in the order given, so name the
// durable one first.
func NewMirroredRevocations(stores ...RevocationStore) *MirroredRevocations {
	return &MirroredRevocations{stores: stores}
}

// Revoke records r in every store. A store that fails does not stop the
// others; the error names the failure, and revoking again (which is
// idempotent) repairs it.
func (m *MirroredRevocations) Revoke(ctx context.Context, r Revocation) error {
	var errs []error
	for _, s := range m.stores {
		if err := s.Revoke(ctx, r); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// IsRevoked reports whether any store holds a revocation of c. It fails
// only when no store says so and one could not be asked.
func (m *MirroredRevocations) IsRevoked(ctx context.Context, c *Claims) (bool, error) {
	var errs []error
	for _, s := range m.stores {
		revoked, err := s.IsRevoked(ctx, c)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if revoked {
			return true, nil
		}
	}
	return false, errors.Join(errs...)
}

// List returns the live revocations of every store, each id once with
// the latest Until and the first CreatedAt.
func (m *MirroredRevocations) List(ctx context.Context) ([]Revocation, error) {
	seen := map[[2]string]int{}
	var out []Revocation
	for _, s := range m.stores {
		rs, err := s.List(ctx)
		if err != nil {
			return nil, err
		}
		for _, r := range rs {
			k := [2]string{r.SessionID, r.TokenID}
			i, ok := seen[k]
			if !ok {
				seen[k] = len(out)
				out = append(out, r)
				continue
			}
			if r.Until.After(out[i].Until) {
				out[i].Until, out[i].Reason = r.Until, r.Reason
			}
			if !r.CreatedAt.IsZero() && (out[i].CreatedAt.IsZero() || r.CreatedAt.Before(out[i].CreatedAt)) {
				out[i].CreatedAt = r.CreatedAt
			}
		}
	}
	sortRevocations(out)
	return out, nil
}

// Snapshot returns the union of every store's live revocations. It fails
// when any store fails, so that the caller keeps its last complete
// snapshot rather than one missing a store's revocations.
func (m *MirroredRevocations) Snapshot(ctx context.Context) (*RevocationSet, error) {
	out := newRevocationSet()
	for _, s := range m.stores {
		set, err := s.Snapshot(ctx)
		if err != nil {
			return nil, fmt.Errorf("auth: revocation snapshot: %w", err)
		}
		if set == nil {
			continue
		}
		for id, until := range set.sessions {
			out.add(kindSession, id, until)
		}
		for id, until := range set.tokens {
			out.add(kindToken, id, until)
		}
	}
	return out, nil
}

// Prune deletes expired revocations in every store and says how many
// revocations it deleted: the most any one store deleted, since the
// stores hold the same ones.
func (m *MirroredRevocations) Prune(ctx context.Context) (int, error) {
	n := 0
	var errs []error
	for _, s := range m.stores {
		k, err := s.Prune(ctx)
		n = max(n, k)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}

var _ RevocationStore = (*MirroredRevocations)(nil)

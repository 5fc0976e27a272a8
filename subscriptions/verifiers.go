package subscriptions

import (
	"context"

	"github.com/heraldgw/herald/auth"
)

// SubTokenVerifier verifies a subscription token for a connection and
// returns its claims; *auth.Verifier and *auth.HMACVerifier satisfy it.
// The returned Channel is compared with the requested one here, and the
// returned ExpiresAt bounds the subscription.
type SubTokenVerifier interface {
	VerifySubscriptionClaims(ctx context.Context, token string, conn *auth.Claims) (*auth.Claims, error)
}

// RevocationChecker says whether claims were revoked; every
// auth.RevocationStore satisfies it.
type RevocationChecker interface {
	IsRevoked(ctx context.Context, c *auth.Claims) (bool, error)
}

// auth's verifiers and revocation stores plug in as they are.
var (
	_ SubTokenVerifier  = (*auth.Verifier)(nil)
	_ SubTokenVerifier  = (*auth.HMACVerifier)(nil)
	_ RevocationChecker = auth.RevocationStore(nil)
)

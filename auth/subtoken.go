package auth

import (
	"context"
	"fmt"
)

// VerifySubscriptionToken verifies a subscription token for the connection
// whose verified claims are conn and returns the one channel it names
// (herald.channel). The token must pass every Verify check and carry the
// same sub and herald.tenant as conn.
func (v *Verifier) VerifySubscriptionToken(token string, conn *Claims) (channel string, err error) {
	c, err := v.VerifySubscriptionClaims(context.Background(), token, conn)
	if err != nil {
		return "", err
	}
	return c.Channel, nil
}

// VerifySubscriptionClaims is VerifySubscriptionToken returning the whole
// claims of the subscription token (its exp bounds the subscription, its
// sid/jti can be revoked). ctx bounds any JWKS reload.
func (v *Verifier) VerifySubscriptionClaims(ctx context.Context, token string, conn *Claims) (*Claims, error) {
	if conn == nil {
		return nil, fmt.Errorf("auth: subscription token: no connection claims")
	}
	c, err := v.verify(ctx, token)
	v.m.verifyResult(err)
	if err != nil {
		return nil, fmt.Errorf("auth: subscription token: %w", err)
	}
	switch {
	case c.Channel == "":
		return nil, fmt.Errorf("auth: subscription token: %w: herald.channel is missing", ErrInvalidToken)
	case c.Tenant != conn.Tenant:
		return nil, fmt.Errorf("auth: subscription token: %w: tenant differs from the connection's", ErrInvalidToken)
	case c.Subject != conn.Subject:
		return nil, fmt.Errorf("auth: subscription token: %w: sub differs from the connection's", ErrInvalidToken)
	}
	return c, nil
}

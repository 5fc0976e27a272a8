package auth

import "time"

// Claims is what Herald reads from a verified token.
type Claims struct {
	Subject   string    // sub, required
	Tenant    string    // herald.tenant, required
	Subscribe []string  // herald.subscribe grant patterns
	Publish   []string  // herald.publish grant patterns (interactive channels)
	Channel   string    // herald.channel: set only in subscription tokens
	SessionID string    // sid, optional, for revocation
	TokenID   string    // jti, optional, for revocation
	ExpiresAt time.Time // exp, required
	IssuedAt  time.Time // iat, optional
}

package auth

import (
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// heraldClaim is the JSON shape of the "herald" claim.
type heraldClaim struct {
	Tenant    string   `json:"tenant"`
	Subscribe []string `json:"subscribe,omitempty"`
	Publish   []string `json:"publish,omitempty"`
	Channel   string   `json:"channel,omitempty"`
}

type jwtClaims struct {
	jwt.RegisteredClaims
	SessionID string       `json:"sid,omitempty"`
	Herald    *heraldClaim `json:"herald"`
}

// MintHS256 signs c with secret (HS256). It is for development tokens and
// tests; production tokens come from the application's identity provider.
func MintHS256(secret []byte, c Claims) (string, error) {
	if len(secret) == 0 {
		return "", fmt.Errorf("auth: mint: %w", ErrNoKey)
	}
	if c.Subject == "" || c.Tenant == "" || c.ExpiresAt.IsZero() {
		return "", fmt.Errorf("auth: mint: sub, tenant and exp are required")
	}
	jc := jwtClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   c.Subject,
			ID:        c.TokenID,
			ExpiresAt: jwt.NewNumericDate(c.ExpiresAt),
		},
		SessionID: c.SessionID,
		Herald: &heraldClaim{
			Tenant: c.Tenant, Subscribe: c.Subscribe, Publish: c.Publish, Channel: c.Channel,
		},
	}
	if !c.IssuedAt.IsZero() {
		jc.IssuedAt = jwt.NewNumericDate(c.IssuedAt)
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jc).SignedString(secret)
	if err != nil {
		return "", fmt.Errorf("auth: mint: %w", err)
	}
	return s, nil
}

// HMACVerifier verifies HS256/384/512 tokens signed with one secret.
type HMACVerifier struct {
	secret []byte
	parser *jwt.Parser
}

// NewHMACVerifier returns a verifier for secret, with leeway for clock skew.
func NewHMACVerifier(secret []byte, leeway time.Duration) *HMACVerifier {
	return &HMACVerifier{
		secret: secret,
		parser: jwt.NewParser(
			jwt.WithValidMethods([]string{"HS256", "HS384", "HS512"}),
			jwt.WithExpirationRequired(),
			jwt.WithLeeway(leeway),
		),
	}
}

// Verify checks token's signature and claims and returns what Herald needs.
func (v *HMACVerifier) Verify(token string) (*Claims, error) {
	var jc jwtClaims
	_, err := v.parser.ParseWithClaims(token, &jc, func(*jwt.Token) (any, error) {
		if len(v.secret) == 0 {
			return nil, ErrNoKey
		}
		return v.secret, nil
	})
	if err != nil {
		return nil, wrapJWTError(err)
	}
	return jc.toClaims()
}

func wrapJWTError(err error) error {
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return fmt.Errorf("auth: %w: %w", ErrInvalidToken, ErrExpired)
	case errors.Is(err, jwt.ErrTokenMalformed):
		return fmt.Errorf("auth: %w: malformed", ErrInvalidToken)
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return fmt.Errorf("auth: %w: signature does not verify", ErrInvalidToken)
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return fmt.Errorf("auth: %w: unverifiable (algorithm or key not accepted)", ErrInvalidToken)
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return fmt.Errorf("auth: %w: not valid yet (nbf)", ErrInvalidToken)
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return fmt.Errorf("auth: %w: exp is required", ErrInvalidToken)
	}
	return fmt.Errorf("auth: %w: %v", ErrInvalidToken, err)
}

func (jc *jwtClaims) toClaims() (*Claims, error) {
	if jc.Subject == "" {
		return nil, fmt.Errorf("auth: %w: sub is required", ErrInvalidToken)
	}
	if jc.Herald == nil || jc.Herald.Tenant == "" {
		return nil, fmt.Errorf("auth: %w: herald.tenant is required", ErrInvalidToken)
	}
	c := &Claims{
		Subject:   jc.Subject,
		Tenant:    jc.Herald.Tenant,
		Subscribe: jc.Herald.Subscribe,
		Publish:   jc.Herald.Publish,
		Channel:   jc.Herald.Channel,
		SessionID: jc.SessionID,
		TokenID:   jc.ID,
		ExpiresAt: jc.ExpiresAt.Time,
	}
	if jc.IssuedAt != nil {
		c.IssuedAt = jc.IssuedAt.Time
	}
	return c, nil
}

package auth

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/heraldgw/herald/internal/names"
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

// timeClaims are the NumericDate claims (RFC 7519 §2): each must be a JSON
// number. golang-jwt also accepts a string holding a number, and treats
// null as absent; Herald refuses both.
var timeClaims = [...]string{"exp", "nbf", "iat"}

// UnmarshalJSON decodes the claims after checking that exp, nbf and iat,
// when present, are JSON numbers. Member names are compared as
// encoding/json matches them to fields (case-insensitively), so "EXP"
// cannot smuggle a string past the check.
func (jc *jwtClaims) UnmarshalJSON(b []byte) error {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(b, &members); err != nil {
		return err
	}
	for name, raw := range members {
		for _, tc := range timeClaims {
			if strings.EqualFold(name, tc) && !isJSONNumber(raw) {
				return &tokenError{tc + " is not a JSON number"}
			}
		}
	}
	type plain jwtClaims // the same fields without this method
	return json.Unmarshal(b, (*plain)(jc))
}

// isJSONNumber reports whether raw, one well-formed JSON value as
// encoding/json hands it to a RawMessage, is a number.
func isJSONNumber(raw json.RawMessage) bool {
	return len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9')
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

// HMACVerifier verifies HS256/384/512 tokens signed with one secret. It
// is a Verifier configured with only that secret, kept for callers of the
// first API; every Verifier method is available on it.
type HMACVerifier struct {
	*Verifier
}

// NewHMACVerifier returns a verifier for secret, with leeway for clock
// skew (zero means none, as before Config existed). An empty secret gives a
// verifier that rejects every token with ErrNoKey.
func NewHMACVerifier(secret []byte, leeway time.Duration) *HMACVerifier {
	if leeway <= 0 {
		leeway = -1 // Config: negative means no leeway
	}
	cfg := Config{
		HMACSecret: secret,
		Leeway:     leeway,
		Algorithms: slices.Clone(hmacAlgorithms),
	}.withDefaults()
	return &HMACVerifier{Verifier: newVerifier(cfg, nil)}
}

// Verify checks token's signature and claims and returns what Herald needs.
func (v *HMACVerifier) Verify(token string) (*Claims, error) {
	return v.Verifier.Verify(token)
}

func (jc *jwtClaims) toClaims() (*Claims, error) {
	if jc.Subject == "" {
		return nil, fmt.Errorf("%w: sub is required", ErrInvalidToken)
	}
	if jc.Herald == nil || jc.Herald.Tenant == "" {
		return nil, fmt.Errorf("%w: herald.tenant is required", ErrInvalidToken)
	}
	// An invalid tenant is a bad token (401), not a bad request later: the
	// error wraps ErrInvalidToken only, not names.ErrInvalidName, and does
	// not echo the value.
	if names.ValidateTenant(jc.Herald.Tenant) != nil {
		return nil, fmt.Errorf("%w: herald.tenant is not a valid tenant name", ErrInvalidToken)
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

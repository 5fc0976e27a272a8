package auth

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/golang-jwt/jwt/v5"

	"github.com/heraldgw/herald/internal/lifecycle"
)

// MaxTokenBytes is the longest token Verify parses; longer input is
// rejected before any decoding.
const MaxTokenBytes = 16 << 10

// Verifier checks connection and subscription tokens against an HMAC
// secret and/or a JWK Set. It is safe for concurrent use. With a JWKS it
// is also a service: Start runs the periodic reload, Stop ends it; without
// Start the set is still reloaded lazily by Verify.
type Verifier struct {
	cfg    Config
	parser *jwt.Parser
	jwks   *jwksSource // nil without Config.JWKS
	svc    lifecycle.Service
	m      *authMetrics
}

// NewVerifier validates cfg and returns a Verifier. A JWKS file is read
// now (an unreadable or keyless file is an error); a JWKS URL is fetched by
// Start or by the first Verify that needs it.
func NewVerifier(cfg Config) (*Verifier, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m, err := newAuthMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	v := newVerifier(cfg, m)
	if v.jwks != nil && !v.jwks.isURL {
		if err := v.jwks.reload(context.Background(), true, false); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// newVerifier builds a Verifier from a defaulted config without validation.
func newVerifier(cfg Config, m *authMetrics) *Verifier {
	v := &Verifier{
		cfg: cfg,
		parser: jwt.NewParser(
			jwt.WithValidMethods(cfg.Algorithms),
			jwt.WithExpirationRequired(),
			jwt.WithIssuedAt(),
			jwt.WithLeeway(cfg.Leeway),
			jwt.WithTimeFunc(cfg.Now),
			jwt.WithStrictDecoding(),
		),
		m: m,
	}
	if cfg.JWKS != "" {
		v.jwks = newJWKSSource(cfg, func(ok bool, n int, err error) {
			m.jwksResult(ok, n)
			if err != nil {
				cfg.Logger.Warn("auth: jwks reload failed; keeping the previous keys", "error", err)
			}
		})
	}
	return v
}

// Start loads the JWKS (when configured) and reloads it every JWKSRefresh
// until Stop or until ctx ends. The loop runs even when the first load
// fails; the error is returned so the caller can log it, and Verify keeps
// retrying at most once per JWKSMinRefresh. A second Start returns an
// error wrapping ErrStarted, a Start after Stop one wrapping ErrStopped.
// Without a JWKS, Start does nothing.
func (v *Verifier) Start(ctx context.Context) error {
	if v.jwks == nil {
		return nil
	}
	if err := v.svc.Start(ctx, nil, v.jwks.loop); err != nil {
		return fmt.Errorf("auth: start: %w", err)
	}
	if v.jwks.stale() {
		return v.jwks.reload(ctx, true, false)
	}
	return nil
}

// Stop ends the reload loop and waits for it. It is safe to call twice or
// before Start.
func (v *Verifier) Stop() { v.svc.Stop(nil) }

// Verify checks a connection token: header (no crit), signature,
// algorithm, exp/nbf/iat (with leeway; exp, nbf and iat must be JSON
// numbers; iat must not lie in the future), the lifetime (MaxLifetime),
// iss and aud (when configured) and the Herald claims (sub and
// herald.tenant required, herald.tenant a valid tenant name; a token with
// herald.channel is a subscription token and is refused here), and returns
// the claims.
// Every failure wraps ErrInvalidToken (and ErrExpired when exp passed);
// the message names the failed check and never contains the token.
func (v *Verifier) Verify(token string) (*Claims, error) {
	return v.VerifyContext(context.Background(), token)
}

// VerifyContext is Verify with ctx bounding any JWKS reload it triggers.
func (v *Verifier) VerifyContext(ctx context.Context, token string) (*Claims, error) {
	c, err := v.verify(ctx, token)
	if err == nil && c.Channel != "" {
		err = fmt.Errorf("%w: a subscription token (herald.channel) cannot authenticate a connection", ErrInvalidToken)
		c = nil
	}
	v.m.verifyResult(err)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	return c, nil
}

func (v *Verifier) verify(ctx context.Context, token string) (*Claims, error) {
	if token == "" {
		return nil, fmt.Errorf("%w: empty", ErrInvalidToken)
	}
	if len(token) > MaxTokenBytes {
		return nil, fmt.Errorf("%w: longer than %d bytes", ErrInvalidToken, MaxTokenBytes)
	}
	var jc jwtClaims
	tok, err := v.parser.ParseWithClaims(token, &jc, func(t *jwt.Token) (any, error) {
		return v.keyFor(ctx, t)
	})
	if err != nil {
		return nil, v.wrapParseError(tok, err)
	}
	if v.cfg.Issuer != "" && jc.Issuer != v.cfg.Issuer {
		return nil, fmt.Errorf("%w: iss does not match the configured issuer", ErrInvalidToken)
	}
	if v.cfg.Audience != "" && !slices.Contains(jc.Audience, v.cfg.Audience) {
		return nil, fmt.Errorf("%w: aud does not include the configured audience", ErrInvalidToken)
	}
	if err := v.checkLifetime(&jc); err != nil {
		return nil, err
	}
	return jc.toClaims()
}

// checkLifetime refuses a token that lives longer than MaxLifetime: from
// now to its exp, or from its iat to its exp.
func (v *Verifier) checkLifetime(jc *jwtClaims) error {
	limit := v.cfg.MaxLifetime
	if limit <= 0 || jc.ExpiresAt == nil {
		return nil
	}
	exp := jc.ExpiresAt.Time
	if exp.Sub(v.cfg.Now()) > limit {
		return fmt.Errorf("%w: exp is further away than the longest accepted token lifetime (%s)", ErrInvalidToken, limit)
	}
	if jc.IssuedAt != nil && exp.Sub(jc.IssuedAt.Time) > limit {
		return fmt.Errorf("%w: exp - iat exceeds the longest accepted token lifetime (%s)", ErrInvalidToken, limit)
	}
	return nil
}

// tokenError is a refusal found while parsing (a header or claim Herald
// does not accept) whose message is safe to show.
type tokenError struct{ msg string }

// Error returns the safe message.
func (e *tokenError) Error() string { return e.msg }

// checkHeader refuses header members Herald must not ignore. "crit" lists
// extensions the recipient must understand (RFC 7515 §4.1.11); Herald
// understands none, so any crit member, even an empty or malformed one,
// is refused.
func checkHeader(t *jwt.Token) error {
	if _, ok := t.Header["crit"]; ok {
		return &tokenError{"header carries crit (no critical extension is supported)"}
	}
	return nil
}

// keyError is a key-lookup failure whose message is safe to show.
type keyError struct{ msg string }

// Error returns the safe message.
func (e *keyError) Error() string { return e.msg }

// keyFor checks t's header (checkHeader), then picks the verification
// key(s) for t. Keys are matched to the
// token's alg by type (fits), so an RSA, EC or OKP key never verifies an HS
// token and the HMAC secret never verifies anything but HS tokens.
func (v *Verifier) keyFor(ctx context.Context, t *jwt.Token) (any, error) {
	if err := checkHeader(t); err != nil {
		return nil, err // before any key lookup, so it never triggers a JWKS reload
	}
	alg := t.Method.Alg()
	kid := ""
	if raw, ok := t.Header["kid"]; ok {
		s, isString := raw.(string)
		if !isString {
			return nil, &keyError{"kid is not a string"}
		}
		kid = s
	}
	isHMAC := strings.HasPrefix(alg, "HS")
	secret := v.cfg.HMACSecret
	var set *keySet
	if v.jwks != nil {
		set, _ = v.jwks.current()
		if v.jwks.stale() {
			// With keys in hand only one caller refreshes and the rest go on
			// with the current set; with none, all wait for the load.
			_ = v.jwks.reload(ctx, false, set != nil)
			set, _ = v.jwks.current()
		}
	}
	if kid != "" {
		keys, known := fittingByKID(set, kid, alg)
		if known && len(keys) == 0 {
			return nil, &keyError{"key named by kid does not fit algorithm " + alg}
		}
		if !known {
			if isHMAC && len(secret) > 0 {
				return secret, nil
			}
			if v.jwks == nil {
				return nil, &keyError{"unknown kid and no key set configured"}
			}
			_ = v.jwks.reload(ctx, false, false)
			set, _ = v.jwks.current()
			keys, known = fittingByKID(set, kid, alg)
			if !known {
				if set == nil {
					return nil, &keyError{"key set unavailable"}
				}
				return nil, &keyError{"unknown kid"}
			}
			if len(keys) == 0 {
				return nil, &keyError{"key named by kid does not fit algorithm " + alg}
			}
		}
		return keyResult(keys), nil
	}
	var keys []jwt.VerificationKey
	if isHMAC && len(secret) > 0 {
		keys = append(keys, secret)
	}
	if set != nil {
		for _, k := range set.all {
			if k.fits(alg) {
				keys = append(keys, k.key)
			}
		}
	}
	if len(keys) == 0 {
		if v.jwks != nil && set == nil {
			return nil, &keyError{"key set unavailable"}
		}
		return nil, &keyError{"no key for algorithm " + alg}
	}
	return keyResult(keys), nil
}

func fittingByKID(set *keySet, kid, alg string) (keys []jwt.VerificationKey, known bool) {
	if set == nil {
		return nil, false
	}
	cands, known := set.byKID[kid]
	for _, k := range cands {
		if k.fits(alg) {
			keys = append(keys, k.key)
		}
	}
	return keys, known
}

func keyResult(keys []jwt.VerificationKey) any {
	if len(keys) == 1 {
		return keys[0]
	}
	return jwt.VerificationKeySet{Keys: keys}
}

// wrapParseError turns a golang-jwt error into one naming the failed
// check(s). Nothing from the token is echoed except an algorithm name that
// golang-jwt itself recognised.
func (v *Verifier) wrapParseError(tok *jwt.Token, err error) error {
	var te *tokenError
	if errors.As(err, &te) {
		return fmt.Errorf("%w: %s", ErrInvalidToken, te.msg)
	}
	var ke *keyError
	if errors.As(err, &ke) {
		return fmt.Errorf("%w: %w: %s", ErrInvalidToken, ErrNoKey, ke.msg)
	}
	if errors.Is(err, jwt.ErrTokenMalformed) {
		return fmt.Errorf("%w: malformed", ErrInvalidToken)
	}
	if errors.Is(err, jwt.ErrTokenUnverifiable) {
		return fmt.Errorf("%w: algorithm missing or unsupported", ErrInvalidToken)
	}
	if errors.Is(err, jwt.ErrTokenSignatureInvalid) {
		if tok != nil && tok.Method != nil && !slices.Contains(v.cfg.Algorithms, tok.Method.Alg()) {
			return fmt.Errorf("%w: algorithm %s not allowed", ErrInvalidToken, tok.Method.Alg())
		}
		return fmt.Errorf("%w: signature does not verify", ErrInvalidToken)
	}
	var checks []string
	if errors.Is(err, jwt.ErrTokenRequiredClaimMissing) {
		checks = append(checks, "exp is required")
	}
	if errors.Is(err, jwt.ErrTokenNotValidYet) {
		checks = append(checks, "not valid yet (nbf)")
	}
	if errors.Is(err, jwt.ErrTokenUsedBeforeIssued) {
		checks = append(checks, "issued in the future (iat)")
	}
	if errors.Is(err, jwt.ErrTokenExpired) {
		if len(checks) > 0 {
			return fmt.Errorf("%w: %w (%s)", ErrInvalidToken, ErrExpired, strings.Join(checks, ", "))
		}
		return fmt.Errorf("%w: %w", ErrInvalidToken, ErrExpired)
	}
	if len(checks) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidToken, strings.Join(checks, ", "))
	}
	return fmt.Errorf("%w: claims rejected", ErrInvalidToken)
}

package auth

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults for Config.
const (
	DefaultLeeway             = 30 * time.Second
	DefaultMaxTokenLifetime   = 24 * time.Hour
	DefaultJWKSRefresh        = 5 * time.Minute
	DefaultJWKSMinRefresh     = 10 * time.Second
	DefaultJWKSFetchTimeout   = 5 * time.Second
	maxJWKSBytes              = 1 << 20
	minRSABits                = 2048
	maxAlgorithmsConfigLength = 32
)

// HMAC, asymmetric and all supported algorithm names.
var (
	hmacAlgorithms       = []string{"HS256", "HS384", "HS512"}
	asymmetricAlgorithms = []string{
		"RS256", "RS384", "RS512",
		"PS256", "PS384", "PS512",
		"ES256", "ES384", "ES512",
		"EdDSA",
	}
)

// SupportedAlgorithms lists every JWS algorithm a Verifier can accept.
// "none" is never among them.
func SupportedAlgorithms() []string {
	return append(slices.Clone(hmacAlgorithms), asymmetricAlgorithms...)
}

// Config configures a Verifier. At least one key source (HMACSecret or
// JWKS) is required.
type Config struct {
	// HMACSecret verifies HS256/384/512 tokens; its raw bytes are the key.
	// It is the only HMAC key: symmetric ("oct") keys in a JWKS are
	// refused, since anyone who can read a key set could mint tokens with
	// them. Default: none (no HS token verifies).
	HMACSecret []byte

	// JWKS is where RSA, EC and Ed25519 public keys come from: an http(s)
	// URL, or a file path (optionally prefixed "file://"). Keys are chosen
	// by the token's "kid". Default: none.
	JWKS string

	// JWKSRefresh is how often the key set is reloaded, by the service loop
	// (Start) or lazily by Verify when the loaded set is older. Default 5m.
	JWKSRefresh time.Duration

	// JWKSMinRefresh is the least time between two reload attempts, which
	// bounds reloads caused by tokens naming an unknown kid. Default 10s
	// (or JWKSRefresh when that is shorter).
	JWKSMinRefresh time.Duration

	// JWKSFetchTimeout bounds one fetch of a JWKS URL. Default 5s.
	JWKSFetchTimeout time.Duration

	// HTTPClient fetches a JWKS URL. Default: a client of its own with
	// JWKSFetchTimeout as its timeout.
	HTTPClient *http.Client

	// Issuer, when set, must equal the token's "iss". Default: not checked.
	Issuer string

	// Audience, when set, must be one of the token's "aud" values.
	// Default: not checked.
	Audience string

	// Leeway is the clock skew allowed when checking exp, nbf and iat (an
	// iat further than Leeway in the future is refused). Default 30s
	// (DefaultLeeway); a negative value means no leeway.
	Leeway time.Duration

	// MaxLifetime is the longest token lifetime accepted: a token whose
	// exp lies further than this beyond now, or beyond its iat, is
	// refused. A revocation kept this long therefore outlives every token
	// it must stop. Default 24h (DefaultMaxTokenLifetime); a negative value
	// means no bound.
	MaxLifetime time.Duration

	// Algorithms lists the accepted "alg" values, a subset of
	// SupportedAlgorithms(). Default: HS256/384/512 when HMACSecret is set,
	// plus RS256/384/512, PS256/384/512, ES256/384/512 and EdDSA when JWKS
	// is set.
	Algorithms []string

	// Now is the clock. Default time.Now.
	Now func() time.Time

	// Logger receives JWKS reload failures. Default: discard.
	Logger *slog.Logger

	// Registerer receives the auth metrics. Default nil: not registered.
	Registerer prometheus.Registerer
}

// defaultOrNone reads a duration setting where 0 means def and a negative
// value means none (0).
func defaultOrNone(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}

func (c Config) withDefaults() Config {
	c.JWKSRefresh = cmp.Or(c.JWKSRefresh, DefaultJWKSRefresh)
	c.JWKSMinRefresh = cmp.Or(c.JWKSMinRefresh, min(DefaultJWKSMinRefresh, c.JWKSRefresh))
	c.JWKSFetchTimeout = cmp.Or(c.JWKSFetchTimeout, DefaultJWKSFetchTimeout)
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: c.JWKSFetchTimeout}
	}
	c.Leeway = defaultOrNone(c.Leeway, DefaultLeeway)
	c.MaxLifetime = defaultOrNone(c.MaxLifetime, DefaultMaxTokenLifetime)
	if len(c.Algorithms) == 0 {
		if len(c.HMACSecret) > 0 {
			c.Algorithms = append(c.Algorithms, hmacAlgorithms...)
		}
		if c.JWKS != "" {
			c.Algorithms = append(c.Algorithms, asymmetricAlgorithms...)
		}
	} else {
		c.Algorithms = slices.Clone(c.Algorithms)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	if len(c.HMACSecret) == 0 && c.JWKS == "" {
		return fmt.Errorf("auth: config: %w: set HMACSecret or JWKS", ErrNoKey)
	}
	if c.JWKSRefresh < 0 || c.JWKSMinRefresh < 0 || c.JWKSFetchTimeout < 0 {
		return fmt.Errorf("auth: config: JWKSRefresh, JWKSMinRefresh and JWKSFetchTimeout must not be negative")
	}
	if c.JWKSMinRefresh > c.JWKSRefresh && c.JWKSRefresh > 0 {
		return fmt.Errorf("auth: config: JWKSMinRefresh (%s) must not exceed JWKSRefresh (%s)", c.JWKSMinRefresh, c.JWKSRefresh)
	}
	if isURL(c.JWKS) {
		u, err := url.Parse(c.JWKS)
		if err != nil || u.Host == "" {
			return fmt.Errorf("auth: config: JWKS URL does not parse as an http(s) URL with a host")
		}
	}
	if len(c.Algorithms) > maxAlgorithmsConfigLength {
		return fmt.Errorf("auth: config: Algorithms has %d entries, at most %d", len(c.Algorithms), maxAlgorithmsConfigLength)
	}
	supported := SupportedAlgorithms()
	for _, a := range c.Algorithms {
		if strings.EqualFold(a, "none") {
			return fmt.Errorf("auth: config: algorithm \"none\" is never accepted")
		}
		if !slices.Contains(supported, a) {
			return fmt.Errorf("auth: config: algorithm %q is not supported (supported: %s)", a, strings.Join(supported, ", "))
		}
	}
	return nil
}

// isURL reports whether a JWKS setting names an http(s) URL rather than a file.
func isURL(s string) bool {
	return strings.HasPrefix(s, "https://") || strings.HasPrefix(s, "http://")
}

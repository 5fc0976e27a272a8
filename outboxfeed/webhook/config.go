package webhook

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"time"

	"github.com/heraldgw/herald/outboxfeed/internal/rules"
)

// ReservedName is the built-in realtime handler's name, which no webhook
// may take.
const ReservedName = rules.RealtimeHandler

// MaxNameLen bounds Config.Name.
const MaxNameLen = rules.MaxHandlerNameLen

// Bounds of the settings (docs/handlers.md lists them with the defaults).
const (
	MinTimeout     = 10 * time.Millisecond
	MaxTimeout     = 5 * time.Minute
	MaxMaxInFlight = 1024
	MaxMaxAttempts = 100
	MaxBatchSize   = rules.MaxBatchSize
	MinClaimDelay  = time.Millisecond
	MaxClaimDelay  = time.Second
	MinMaxAge      = time.Second
	MaxMaxAge      = 90 * 24 * time.Hour
	// MaxDelay bounds every delay setting and DisableAfter.
	MaxDelay = 90 * 24 * time.Hour
	// maxSecretFileBytes bounds a secret_file's size.
	maxSecretFileBytes = 64 << 10
	// maxCAFileBytes bounds a ca_file's size.
	maxCAFileBytes = 1 << 20
)

// DefaultBatchSize is Config.BatchSize's default.
const DefaultBatchSize = 1000

// Config is one webhook endpoint. The yaml tags are the keys of a handler
// in the config file; every error of New names the key. Zero values mean
// the stated default.
type Config struct {
	// Name identifies the handler: 1 to 64 bytes of [a-z0-9_-], not
	// "realtime". Required.
	Name string `yaml:"name"`
	// URL is where records are POSTed: an absolute http or https URL,
	// without user info or fragment. Required.
	URL string `yaml:"url"`
	// Secret, Secrets and SecretFile give the signing secrets; exactly one
	// of them is set. Secret is one whsec_… value; Secrets several (a
	// rotation: every request carries one signature per secret); SecretFile
	// the path of a file holding one secret per line (empty lines and lines
	// starting with # ignored), read by New. At most MaxSecrets.
	Secret     Secret   `yaml:"secret"`
	Secrets    []Secret `yaml:"secrets"`
	SecretFile string   `yaml:"secret_file"`
	// Timeout bounds one request: connecting, TLS, sending, the response
	// headers and reading the body. Default: 15s; between 10ms and 5m.
	Timeout time.Duration `yaml:"timeout"`
	// MaxInFlight is how many requests to the endpoint may be under way at
	// once; it also sizes the pool of idle keep-alive connections.
	// Default: 16; at most 1024.
	MaxInFlight int `yaml:"max_in_flight"`
	// ClaimDelay is how long after a claim of less than a full batch the
	// handler waits before it claims again, so the records committed
	// meanwhile go out of one claim: each claim costs the store about the
	// same whatever it finds, so a handler that keeps up claims fewer
	// records each time than realtime needs to. Default: 20ms; between 1ms
	// and 1s.
	ClaimDelay time.Duration `yaml:"claim_delay"`
	// BatchSize is the most records one claim of a partition takes for the
	// handler. Its Worker starts a batch's records within its start window
	// (four timeouts and a second; 61 s by default), so a batch must be one
	// the endpoint can start in that time: MaxInFlight requests at a time,
	// 1,000 records start in 61 s while answers take up to about 0.98 s
	// each. Default: 1000; between 1 and 10000.
	BatchSize int `yaml:"batch_size"`
	// MaxAttempts is how many attempts a record gets (outages burn none).
	// Default: 10; at most 100.
	MaxAttempts int `yaml:"max_attempts"`
	// MaxAge is how long after its time a record keeps being retried.
	// Default: 72h; between 1s and 90 days.
	MaxAge time.Duration `yaml:"max_age"`
	// RetryBaseDelay and RetryMaxDelay bound the retry backoff (Schedule).
	// Defaults: 10s and 24h.
	RetryBaseDelay time.Duration `yaml:"retry_base_delay"`
	RetryMaxDelay  time.Duration `yaml:"retry_max_delay"`
	// OutageBaseDelay and OutageMaxDelay bound the outage backoff
	// (Schedule). Defaults: 1s and 5m.
	OutageBaseDelay time.Duration `yaml:"outage_base_delay"`
	OutageMaxDelay  time.Duration `yaml:"outage_max_delay"`
	// RetryAfterMax is the longest Retry-After honoured. Default: 1h.
	RetryAfterMax time.Duration `yaml:"retry_after_max"`
	// DisableAfter is how long an endpoint may fail continuously before it
	// is disabled. Default: 120h (5 days).
	DisableAfter time.Duration `yaml:"disable_after"`
	// AllowPrivateNetwork lets the url's host resolve to loopback,
	// private, link-local and other special-purpose addresses (tests,
	// sidecars). Default: false, such connections are refused when they
	// are dialled.
	AllowPrivateNetwork bool `yaml:"allow_private_network"`
	// CAFile is a PEM file of the certificate authorities that verify the
	// endpoint's TLS certificate, in place of the system's; https only.
	// TLS is always verified. Default: "", the system's roots.
	CAFile string `yaml:"ca_file"`
}

// WithDefaults returns c with every zero setting replaced by its default.
func (c Config) WithDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Timeout, 15*time.Second)
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 16
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 10
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	def(&c.ClaimDelay, 20*time.Millisecond)
	def(&c.MaxAge, 72*time.Hour)
	def(&c.RetryBaseDelay, 10*time.Second)
	def(&c.RetryMaxDelay, 24*time.Hour)
	def(&c.OutageBaseDelay, time.Second)
	def(&c.OutageMaxDelay, 5*time.Minute)
	def(&c.RetryAfterMax, time.Hour)
	def(&c.DisableAfter, 120*time.Hour)
	return c
}

// Schedule returns the retry schedule of c's settings (defaults applied).
func (c Config) Schedule() Schedule {
	c = c.WithDefaults()
	return Schedule{
		MaxAttempts:     c.MaxAttempts,
		MaxAge:          c.MaxAge,
		RetryBaseDelay:  c.RetryBaseDelay,
		RetryMaxDelay:   c.RetryMaxDelay,
		OutageBaseDelay: c.OutageBaseDelay,
		OutageMaxDelay:  c.OutageMaxDelay,
		RetryAfterMax:   c.RetryAfterMax,
		DisableAfter:    c.DisableAfter,
	}
}

// validate checks c (defaults applied) without touching the files it
// names; errors wrap ErrInvalidConfig and name the key.
func (c Config) validate() error {
	bad := func(format string, args ...any) error { return invalidConfig(c.Name, format, args...) }
	if err := checkName(c.Name); err != nil {
		return invalidConfig("", "%v", err)
	}
	u, err := parseURL(c.URL)
	if err != nil {
		return bad("%v", err)
	}
	set := 0
	for _, given := range []bool{c.Secret != "", c.Secrets != nil, c.SecretFile != ""} {
		if given {
			set++
		}
	}
	switch {
	case set == 0:
		return bad("no signing secret: set secret, secrets or secret_file")
	case set > 1:
		return bad("set only one of secret, secrets and secret_file")
	case c.Secret != "":
		if _, err := ParseSecret(c.Secret); err != nil {
			return bad("secret: %v", err)
		}
	case c.Secrets != nil:
		if len(c.Secrets) == 0 || len(c.Secrets) > MaxSecrets {
			return bad("secrets: %d secrets; want 1 to %d", len(c.Secrets), MaxSecrets)
		}
		for i, s := range c.Secrets {
			if _, err := ParseSecret(s); err != nil {
				return bad("secrets[%d]: %v", i, err)
			}
		}
	}
	switch {
	case c.Timeout < MinTimeout || c.Timeout > MaxTimeout:
		return bad("timeout %v: must be between %v and %v", c.Timeout, MinTimeout, MaxTimeout)
	case c.MaxInFlight < 1 || c.MaxInFlight > MaxMaxInFlight:
		return bad("max_in_flight %d: must be between 1 and %d", c.MaxInFlight, MaxMaxInFlight)
	case c.ClaimDelay < MinClaimDelay || c.ClaimDelay > MaxClaimDelay:
		return bad("claim_delay %v: must be between %v and %v", c.ClaimDelay, MinClaimDelay, MaxClaimDelay)
	case c.BatchSize < 1 || c.BatchSize > MaxBatchSize:
		return bad("batch_size %d: must be between 1 and %d", c.BatchSize, MaxBatchSize)
	case c.MaxAttempts < 1 || c.MaxAttempts > MaxMaxAttempts:
		return bad("max_attempts %d: must be between 1 and %d", c.MaxAttempts, MaxMaxAttempts)
	case c.MaxAge < MinMaxAge || c.MaxAge > MaxMaxAge:
		return bad("max_age %v: must be between %v and %v", c.MaxAge, MinMaxAge, MaxMaxAge)
	case c.RetryBaseDelay < 0 || c.RetryMaxDelay < c.RetryBaseDelay || c.RetryMaxDelay > MaxDelay:
		return bad("retry_base_delay %v, retry_max_delay %v: want 0 ≤ retry_base_delay ≤ retry_max_delay ≤ %v", c.RetryBaseDelay, c.RetryMaxDelay, MaxDelay)
	case c.OutageBaseDelay < 0 || c.OutageMaxDelay < c.OutageBaseDelay || c.OutageMaxDelay > MaxDelay:
		return bad("outage_base_delay %v, outage_max_delay %v: want 0 ≤ outage_base_delay ≤ outage_max_delay ≤ %v", c.OutageBaseDelay, c.OutageMaxDelay, MaxDelay)
	case c.RetryAfterMax < 0 || c.RetryAfterMax > MaxDelay:
		return bad("retry_after_max %v: must be between 0 and %v", c.RetryAfterMax, MaxDelay)
	case c.DisableAfter < 0 || c.DisableAfter > MaxDelay:
		return bad("disable_after %v: must be between 0 and %v", c.DisableAfter, MaxDelay)
	case c.CAFile != "" && u.Scheme != "https":
		return bad("ca_file is set but url is not https")
	}
	return nil
}

// checkName checks a handler name: the rule of every handler's name, and
// not the built-in handler's.
func checkName(name string) error {
	if err := rules.ValidateHandlerName(name); err != nil {
		return err
	}
	if name == ReservedName {
		return fmt.Errorf("name %q is reserved for the built-in realtime handler", name)
	}
	return nil
}

// parseURL checks an endpoint url. Its errors never hold the url's user
// info.
func parseURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("url is empty")
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // ue.Error() would repeat the raw url, password included
		}
		return nil, fmt.Errorf("url: not a valid URL: %v", err)
	}
	switch {
	case u.User != nil:
		return nil, fmt.Errorf("url %q: must not hold user info (user:password@); the signature authenticates Herald", u.Redacted())
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("url %q: scheme %q: must be https or http", u.Redacted(), u.Scheme)
	case u.Opaque != "" || u.Host == "":
		return nil, fmt.Errorf("url %q: has no host", u.Redacted())
	case u.Hostname() == "":
		return nil, fmt.Errorf("url %q: has no host name", u.Redacted())
	case u.Fragment != "" || u.RawFragment != "":
		return nil, fmt.Errorf("url %q: must not have a fragment (#…)", u.Redacted())
	}
	if p := u.Port(); p != "" {
		var n int
		for i := 0; i < len(p); i++ {
			n = n*10 + int(p[i]-'0')
			if n > 65535 {
				break
			}
		}
		if n < 1 || n > 65535 {
			return nil, fmt.Errorf("url %q: port %s: must be between 1 and 65535", u.Redacted(), p)
		}
	}
	return u, nil
}

// loadSecrets returns the configured secrets, reading secret_file.
func (c Config) loadSecrets() ([]Secret, error) {
	switch {
	case c.Secret != "":
		return []Secret{c.Secret}, nil
	case c.Secrets != nil:
		return c.Secrets, nil
	}
	content, err := readBounded(c.SecretFile, maxSecretFileBytes)
	if err != nil {
		return nil, invalidConfig(c.Name, "secret_file %s: %v", c.SecretFile, err)
	}
	secrets, err := parseSecretFile(content)
	if err != nil {
		return nil, invalidConfig(c.Name, "secret_file %s: %v", c.SecretFile, err)
	}
	return secrets, nil
}

// loadCA returns the pool of ca_file, or nil for the system's roots.
func (c Config) loadCA() (*x509.CertPool, error) {
	if c.CAFile == "" {
		return nil, nil
	}
	pem, err := readBounded(c.CAFile, maxCAFileBytes)
	if err != nil {
		return nil, invalidConfig(c.Name, "ca_file %s: %v", c.CAFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, invalidConfig(c.Name, "ca_file %s: holds no PEM certificate", c.CAFile)
	}
	return pool, nil
}

// readBounded reads a whole file of at most limit bytes. Its errors do not
// quote the file's content.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is in the caller's message already
		}
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return b, nil
}

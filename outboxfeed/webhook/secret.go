package webhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"hash"
	"log/slog"
	"strconv"
	"sync"
)

// SecretPrefix starts every signing secret in its configured form.
const SecretPrefix = "whsec_"

// Secret key sizes: the Standard Webhooks specification asks for at
// least 24 random bytes and at most 64.
const (
	MinSecretBytes = 24
	MaxSecretBytes = 64
)

// MaxSecrets bounds how many secrets one endpoint signs with (each adds
// one signature to every request).
const MaxSecrets = 10

// redacted is what every formatting of a Secret prints.
const redacted = "whsec_[REDACTED]"

// Secret is one signing secret in its configured form: "whsec_" followed
// by the standard base64 encoding (padded) of 24 to 64 random bytes, the
// HMAC-SHA256 key. A Secret never prints itself: String, Format (every fmt
// verb), GoString, MarshalJSON, MarshalText and LogValue all give
// "whsec_[REDACTED]", so a Config can be logged or marshalled whole.
// string(s) is the only way to its value.
type Secret string

// String returns "whsec_[REDACTED]".
func (Secret) String() string { return redacted }

// GoString returns "whsec_[REDACTED]" (the %#v verb).
func (Secret) GoString() string { return redacted }

// Format prints "whsec_[REDACTED]" for every verb (quoted for %q).
func (Secret) Format(f fmt.State, verb rune) {
	if verb == 'q' {
		_, _ = f.Write([]byte(strconv.Quote(redacted)))
		return
	}
	_, _ = f.Write([]byte(redacted))
}

// MarshalJSON returns the JSON string "whsec_[REDACTED]".
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText returns "whsec_[REDACTED]" (YAML, encoding.TextMarshaler).
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// LogValue makes slog print "whsec_[REDACTED]".
func (Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// GenerateSecret returns a new random secret of 32 bytes.
func GenerateSecret() (Secret, error) {
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		return "", fmt.Errorf("webhook: generate secret: %w", err)
	}
	return Secret(SecretPrefix + base64.StdEncoding.EncodeToString(key[:])), nil
}

// ParseSecret checks s and returns its key: the bytes after "whsec_",
// base64-decoded. Errors wrap ErrInvalidSecret and never contain s or any
// part of it.
func ParseSecret(s Secret) ([]byte, error) {
	enc := string(s)
	if len(enc) < len(SecretPrefix) || enc[:len(SecretPrefix)] != SecretPrefix {
		return nil, fmt.Errorf("%w: does not start with %q", ErrInvalidSecret, SecretPrefix)
	}
	enc = enc[len(SecretPrefix):]
	if enc == "" {
		return nil, fmt.Errorf("%w: nothing after %q", ErrInvalidSecret, SecretPrefix)
	}
	// Reject what StdEncoding would silently skip (newlines) so a secret
	// has exactly one spelling.
	for i := 0; i < len(enc); i++ {
		c := enc[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=') {
			return nil, fmt.Errorf("%w: the part after %q holds a byte that is not standard base64 (A–Z a–z 0–9 + / =) at offset %d",
				ErrInvalidSecret, SecretPrefix, len(SecretPrefix)+i)
		}
	}
	key, err := base64.StdEncoding.Strict().DecodeString(enc)
	if err != nil {
		return nil, fmt.Errorf("%w: the part after %q is not padded standard base64", ErrInvalidSecret, SecretPrefix)
	}
	if len(key) < MinSecretBytes || len(key) > MaxSecretBytes {
		return nil, fmt.Errorf("%w: decodes to %d bytes; want %d to %d", ErrInvalidSecret, len(key), MinSecretBytes, MaxSecretBytes)
	}
	return key, nil
}

// parseSecretFile reads a secret file's content: one secret per line;
// surrounding spaces and tabs, a trailing "\r", empty lines and lines
// starting with "#" are ignored. Errors name the 1-based line, never its
// content.
func parseSecretFile(content []byte) ([]Secret, error) {
	var out []Secret
	for n := 1; len(content) > 0; n++ {
		line := content
		if i := bytes.IndexByte(content, '\n'); i >= 0 {
			line, content = content[:i], content[i+1:]
		} else {
			content = nil
		}
		line = bytes.Trim(line, " \t\r")
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		s := Secret(line)
		if _, err := ParseSecret(s); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if len(out) == MaxSecrets {
			return nil, fmt.Errorf("line %d: more than %d secrets", n, MaxSecrets)
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("holds no secret (one whsec_… per line)")
	}
	return out, nil
}

// Signer computes the webhook-signature header value of the Standard
// Webhooks specification: for each secret, "v1," followed by the base64
// HMAC-SHA256 of "<id>.<timestamp>.<body>" keyed by the secret's bytes,
// the entries separated by one space. It is safe for concurrent use.
type Signer struct {
	macs []*sync.Pool // one pool of keyed HMACs per secret, in order
}

// NewSigner returns a Signer for one or more secrets (at most MaxSecrets).
// Errors wrap ErrInvalidSecret and name the secret by its position only.
func NewSigner(secrets ...Secret) (*Signer, error) {
	if len(secrets) == 0 {
		return nil, fmt.Errorf("%w: no secret", ErrInvalidSecret)
	}
	if len(secrets) > MaxSecrets {
		return nil, fmt.Errorf("%w: %d secrets; at most %d", ErrInvalidSecret, len(secrets), MaxSecrets)
	}
	s := &Signer{macs: make([]*sync.Pool, len(secrets))}
	for i, sec := range secrets {
		key, err := ParseSecret(sec)
		if err != nil {
			return nil, fmt.Errorf("secret %d of %d: %w", i+1, len(secrets), err)
		}
		s.macs[i] = &sync.Pool{New: func() any { return hmac.New(sha256.New, key) }}
	}
	return s, nil
}

// String returns a description without any secret.
func (s *Signer) String() string { return fmt.Sprintf("webhook.Signer(%d secrets)", len(s.macs)) }

// Sign returns the webhook-signature header value.
func (s *Signer) Sign(id string, timestamp int64, body []byte) string {
	return string(s.AppendSign(nil, id, timestamp, body))
}

// AppendSign appends the webhook-signature header value to dst.
func (s *Signer) AppendSign(dst []byte, id string, timestamp int64, body []byte) []byte {
	// The signed prefix "<id>.<timestamp>." is built in dst's spare
	// capacity (then dropped), which needs no allocation of its own.
	start := len(dst)
	dst = append(dst, id...)
	dst = append(dst, '.')
	dst = strconv.AppendInt(dst, timestamp, 10)
	dst = append(dst, '.')
	prefixEnd := len(dst)
	var sum [sha256.Size]byte
	for i, p := range s.macs {
		h := p.Get().(hash.Hash)
		h.Reset()
		_, _ = h.Write(dst[start:prefixEnd])
		_, _ = h.Write(body)
		mac := h.Sum(sum[:0])
		p.Put(h)
		if i > 0 {
			dst = append(dst, ' ')
		}
		dst = append(dst, "v1,"...)
		dst = base64.StdEncoding.AppendEncode(dst, mac)
	}
	// Move the signatures over the prefix.
	n := copy(dst[start:], dst[prefixEnd:])
	return dst[:start+n]
}

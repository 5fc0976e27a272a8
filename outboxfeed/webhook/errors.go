package webhook

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
)

// Sentinel errors. Wrapped errors carry the detail; test with errors.Is.
var (
	// ErrInvalidConfig wraps every configuration error. Its messages name
	// the configuration key (url, secret_file, max_in_flight …), never a
	// secret's value.
	ErrInvalidConfig = errors.New("webhook: invalid config")
	// ErrInvalidSecret wraps every error of ParseSecret and NewSigner.
	ErrInvalidSecret = errors.New("webhook: invalid secret")
	// ErrInvalidMessage is wrapped by the Err of a Result whose Message
	// could not be encoded (ReasonInvalidMessage): nothing was sent.
	ErrInvalidMessage = errors.New("webhook: invalid message")
	// ErrAddressRefused is wrapped by the error of a connection refused
	// because its address is loopback, private, link-local or otherwise
	// special-purpose and allow_private_network is false.
	ErrAddressRefused = errors.New("webhook: address refused")
	// ErrTimeout is wrapped by the Err of a Result whose endpoint did not
	// answer (or did not finish its headers) within the timeout.
	ErrTimeout = errors.New("webhook: timeout")
)

// StatusError is the Err of a Result for an endpoint that answered with a
// status other than 2xx. Read it with errors.As.
type StatusError struct {
	// Status is the HTTP status code.
	Status int
	// Excerpt is the start of the response body: at most ExcerptBytes of
	// valid UTF-8 with control characters (NUL, newlines …) replaced by
	// spaces. Empty when the body was empty.
	Excerpt string
	// Location is the redirect target of a 3xx answer, sanitized and
	// bounded like Excerpt; empty otherwise.
	Location string
	// RetryAfter is the Retry-After header as sent (sanitized, bounded);
	// empty when absent.
	RetryAfter string
}

func (e *StatusError) Error() string {
	b := make([]byte, 0, 64+len(e.Excerpt)+len(e.Location))
	b = append(b, "webhook: endpoint answered "...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	if t := http.StatusText(e.Status); t != "" {
		b = append(b, ' ')
		b = append(b, t...)
	}
	switch {
	case e.Status >= 300 && e.Status < 400:
		if e.Location != "" {
			b = append(b, ", redirecting to "...)
			b = strconv.AppendQuote(b, e.Location)
		}
		b = append(b, " (redirects are not followed: set url to the final address)"...)
	case e.Status == http.StatusGone:
		b = append(b, " (the endpoint asks for no more deliveries)"...)
	}
	if e.RetryAfter != "" {
		b = append(b, " Retry-After: "...)
		b = strconv.AppendQuote(b, e.RetryAfter)
	}
	if e.Excerpt != "" {
		b = append(b, ": "...)
		b = strconv.AppendQuote(b, e.Excerpt)
	}
	return string(b)
}

// invalidConfig returns an error wrapping ErrInvalidConfig for the handler
// name (when known) and the given key.
func invalidConfig(name, format string, args ...any) error {
	if name != "" {
		return fmt.Errorf("%w: handler %q: "+format, append([]any{ErrInvalidConfig, name}, args...)...)
	}
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
}

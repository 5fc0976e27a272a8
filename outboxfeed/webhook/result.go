package webhook

import "time"

// Class is what a delivery's outcome asks the handler to do.
type Class uint8

// The classes of a Result.
const (
	// ClassDelivered: the endpoint answered 2xx; the record is done.
	ClassDelivered Class = iota + 1
	// ClassRetryable: the record failed (5xx other than 502, 503, 504; an
	// unexpected status); an attempt is burnt and the record is retried
	// on Schedule.Retry, or dead-lettered when that says so.
	ClassRetryable
	// ClassPermanent: the record cannot be delivered as it is (4xx other
	// than 410 and 429; a redirect; a Message that cannot be encoded); it
	// is dead-lettered with Result.Err as its last error.
	ClassPermanent
	// ClassOutage: the endpoint is unavailable (429, 502, 503, 504; no
	// connection; a timeout; an address refused by the SSRF rules; a TLS
	// failure); no attempt is burnt, the record waits and the endpoint
	// backs off on Schedule.Outage.
	ClassOutage
	// ClassGone: the endpoint answered 410 Gone; the handler is disabled
	// until an operator enables it, and the record waits (no attempt
	// burnt).
	ClassGone
	// ClassCanceled: the caller's context ended before an answer; nothing
	// is known about the endpoint and no attempt is burnt.
	ClassCanceled
)

// Classes lists every Class, in order.
var Classes = []Class{ClassDelivered, ClassRetryable, ClassPermanent, ClassOutage, ClassGone, ClassCanceled}

// String is the class's name, used as a metric label: delivered,
// retryable, permanent, outage, gone, canceled.
func (c Class) String() string {
	switch c {
	case ClassDelivered:
		return "delivered"
	case ClassRetryable:
		return "retryable"
	case ClassPermanent:
		return "permanent"
	case ClassOutage:
		return "outage"
	case ClassGone:
		return "gone"
	case ClassCanceled:
		return "canceled"
	}
	return "unknown"
}

// Reason says why a delivery ended as it did, finer than its Class; a
// metric label and a log field.
type Reason string

// The reasons of a Result, each with the Class it always comes with.
const (
	ReasonAccepted         Reason = "accepted"           // delivered: 2xx
	ReasonServerError      Reason = "server_error"       // retryable: 5xx other than 502, 503, 504
	ReasonUnexpectedStatus Reason = "unexpected_status"  // retryable: a status outside 200–599
	ReasonClientError      Reason = "client_error"       // permanent: 4xx other than 410, 429
	ReasonRedirect         Reason = "redirect"           // permanent: 3xx (not followed)
	ReasonInvalidMessage   Reason = "invalid_message"    // permanent: the Message cannot be encoded; nothing sent
	ReasonThrottled        Reason = "throttled"          // outage: 429
	ReasonUnavailable      Reason = "unavailable"        // outage: 502, 503, 504
	ReasonTimeout          Reason = "timeout"            // outage: no complete answer within the timeout
	ReasonRefused          Reason = "connection_refused" // outage: connection refused
	ReasonReset            Reason = "connection_reset"   // outage: connection reset or closed before an answer
	ReasonDNS              Reason = "dns"                // outage: the host name did not resolve
	ReasonTLS              Reason = "tls"                // outage: TLS handshake or certificate verification failed
	ReasonAddressRefused   Reason = "address_refused"    // outage: the address is private or special (allow_private_network)
	ReasonNetwork          Reason = "network"            // outage: any other failure to exchange the request
	ReasonGone             Reason = "gone"               // gone: 410
	ReasonCanceled         Reason = "canceled"           // canceled: the caller's context ended
)

// Reasons maps every Reason to the Class it comes with.
var Reasons = map[Reason]Class{
	ReasonAccepted:         ClassDelivered,
	ReasonServerError:      ClassRetryable,
	ReasonUnexpectedStatus: ClassRetryable,
	ReasonClientError:      ClassPermanent,
	ReasonRedirect:         ClassPermanent,
	ReasonInvalidMessage:   ClassPermanent,
	ReasonThrottled:        ClassOutage,
	ReasonUnavailable:      ClassOutage,
	ReasonTimeout:          ClassOutage,
	ReasonRefused:          ClassOutage,
	ReasonReset:            ClassOutage,
	ReasonDNS:              ClassOutage,
	ReasonTLS:              ClassOutage,
	ReasonAddressRefused:   ClassOutage,
	ReasonNetwork:          ClassOutage,
	ReasonGone:             ClassGone,
	ReasonCanceled:         ClassCanceled,
}

// Result is the outcome of one delivery.
type Result struct {
	Class  Class
	Reason Reason
	// Status is the HTTP status code; 0 when there was no answer.
	Status int
	// RetryAfter is the endpoint's Retry-After (either form), cut to the
	// Config's RetryAfterMax; 0 when absent or malformed. Schedule.Outage
	// and Schedule.Retry take it.
	RetryAfter time.Duration
	// Err says what went wrong, for people and last_error; nil when
	// delivered. A *StatusError when the endpoint answered; otherwise it
	// wraps ErrTimeout, ErrAddressRefused, ErrInvalidMessage, the
	// context's error or the network error. It never holds a secret.
	Err error
	// Timestamp is the webhook-timestamp sent (Unix seconds); 0 when
	// nothing was sent.
	Timestamp int64
	// Duration is how long the request took, from sending to the end of
	// reading the answer.
	Duration time.Duration
}

// Failing reports whether r counts as the endpoint failing, for the
// continuous-failure horizon (Schedule.Disable): every class but
// delivered and canceled, and not a Message that could not be encoded
// (the endpoint was not asked).
func (r Result) Failing() bool {
	switch r.Class {
	case ClassDelivered, ClassCanceled:
		return false
	}
	return r.Reason != ReasonInvalidMessage
}

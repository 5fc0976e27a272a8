package outboxfeed

import (
	"context"
	"errors"
	"time"
)

// Deliverer is a handler's target that takes one record at a time (a
// webhook endpoint: outboxfeed/webhook). Deliver returns nil once the
// target accepted r. An error is, by default, an outage of the whole
// target: the record keeps its place, no attempt burnt, and the Worker
// backs off (Unavailable says how long). Retryable, Permanent and Gone
// mark the other outcomes.
type Deliverer interface {
	Deliver(ctx context.Context, r *Record) error
}

// DelivererFunc adapts a function to Deliverer.
type DelivererFunc func(ctx context.Context, r *Record) error

// Deliver calls f.
func (f DelivererFunc) Deliver(ctx context.Context, r *Record) error { return f(ctx, r) }

// Handler is a handler written in Go, for programs that embed the Worker
// (docs/handlers.md, "Go handlers"). Handle receives records of one
// channel, in order, and returns one error per record (nil: done;
// Retryable: retried with backoff, burning an attempt; Permanent:
// dead-lettered; Gone: the handler is disabled; any other error: an
// outage, the record keeps its place and the Worker backs off). A record
// that failed holds back the later records of its channel: whatever
// Handle returns for them, they are delivered again after it, so a
// handler that keeps per-channel order stops at a channel's first failure
// and returns an error for the rest. Records are delivered at least once:
// a handler recognises a repeat by Record.ID.
type Handler interface {
	Handle(ctx context.Context, recs []Record) []error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, recs []Record) []error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, recs []Record) []error { return f(ctx, recs) }

// targetError marks an error of a handler's target.
type targetError struct {
	err   error
	gone  bool
	after time.Duration
}

func (e *targetError) Error() string { return e.err.Error() }
func (e *targetError) Unwrap() error { return e.err }

// Gone marks err as the target refusing every record for good (a webhook
// endpoint answering 410 Gone): the Worker disables its handler, whose
// records then wait until an operator enables it.
func Gone(err error) error {
	if err == nil {
		return nil
	}
	return &targetError{err: err, gone: true}
}

// Unavailable marks err as an outage of the whole target that asks to be
// left alone for after (an HTTP Retry-After), bounded by the Worker's
// OutageMaxDelay; 0 leaves the wait to the Worker's backoff.
func Unavailable(err error, after time.Duration) error {
	if err == nil {
		return nil
	}
	return &targetError{err: err, after: after}
}

// retryAfter is the wait an outage error asks for (0: none).
func retryAfter(err error) time.Duration {
	var te *targetError
	if errors.As(err, &te) {
		return te.after
	}
	return 0
}

// Schedule is a handler target's own retry and outage backoff
// (WorkerConfig.Schedule).
type Schedule interface {
	// Retry is the wait after the failed attempt n (n ≥ 1) of a record
	// whose time is age ago; retryAfter is what the target asked for (0:
	// nothing). ok false dead-letters the record.
	Retry(n int, age, retryAfter time.Duration) (delay time.Duration, ok bool)
	// Outage is the wait after the f-th outage of the target in a row
	// (f ≥ 1).
	Outage(f int, retryAfter time.Duration) time.Duration
}

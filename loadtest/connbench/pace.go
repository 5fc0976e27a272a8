package main

import (
	"context"
	"time"
)

// dueAt is when publication k of a run paced at rate per second that
// started at start is due.
func dueAt(start time.Time, k, rate int) time.Time {
	return start.Add(time.Duration(float64(k) * float64(time.Second) / float64(rate)))
}

// sleepUntil waits until due (not at all when it is less than 50µs away)
// or until ctx ends, whose error it then returns.
func sleepUntil(ctx context.Context, due time.Time) error {
	wait := time.Until(due)
	if wait <= 50*time.Microsecond {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

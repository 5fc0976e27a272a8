package main

import (
	"context"
	"fmt"
	"time"
)

// paceEach calls step for publications k = 0 to total-1, each once it is
// due (dueAt, from now on, at rate per second), and returns the first
// error: step's as it is, or the end of ctx while waiting, as an error of
// the publisher named who.
func paceEach(ctx context.Context, who string, rate, total int, step func(k int, due time.Time) error) error {
	start := time.Now()
	for k := range total {
		due := dueAt(start, k, rate)
		if err := sleepUntil(ctx, due); err != nil {
			return fmt.Errorf("connbench: %s: %w", who, err)
		}
		if err := step(k, due); err != nil {
			return err
		}
	}
	return nil
}

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

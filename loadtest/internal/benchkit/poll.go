package benchkit

import (
	"context"
	"time"
)

// PollUntil calls cond every interval until it is true, it fails, ctx
// ends or timeout passes. When timeout passes it returns timeoutCause
// (nil: context.DeadlineExceeded); when ctx ends, context.Cause(ctx).
func PollUntil(ctx context.Context, timeout, interval time.Duration, timeoutCause error, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, timeoutCause)
	defer cancel()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
		}
	}
}

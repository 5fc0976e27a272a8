package benchkit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Staging is the staged phases' producers at work: workers goroutines
// insert the rows 0 … records−1 in chunks of batch, each taking the next
// chunk until none is left, one of them fails or the phase stops.
type Staging struct {
	cancel context.CancelFunc
	done   chan struct{}
	staged atomic.Bool
	errs   []error
	took   time.Duration
}

// StartStaging starts the producers; insert writes the rows [from, to)
// in one transaction. It returns at once.
func StartStaging(ctx context.Context, workers, records, batch int, insert func(ctx context.Context, from, to int) error) *Staging {
	ctx, cancel := context.WithCancel(ctx)
	s := &Staging{cancel: cancel, done: make(chan struct{}), errs: make([]error, workers)}
	chunks := (records + batch - 1) / batch
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for k := int(next.Add(1) - 1); k < chunks && ctx.Err() == nil; k = int(next.Add(1) - 1) {
				from := k * batch
				if err := insert(ctx, from, min(from+batch, records)); err != nil {
					s.errs[w] = err
					return
				}
			}
		})
	}
	go func() {
		wg.Wait()
		s.took = time.Since(start)
		s.staged.Store(true)
		close(s.done)
	}()
	return s
}

// Done reports whether every producer has returned. Read it before
// counting what was consumed: a count taken after it then covers every
// commit.
func (s *Staging) Done() bool { return s.staged.Load() }

// Err is the producers' errors joined; complete once Done.
func (s *Staging) Err() error {
	if !s.Done() {
		return nil
	}
	return errors.Join(s.errs...)
}

// Stop stops the producers still running, waits for them and returns how
// long they ran: the time to stage every row when they all finished.
func (s *Staging) Stop() time.Duration {
	s.cancel()
	<-s.done
	return s.took
}

// Package lifecycle is the one Start/Stop implementation of Herald's
// long-running parts (brokers, the Worker, the Pruner, the JWKS reloader,
// the gateway's server).
//
// What every part does the same way:
//   - the first Start runs the part's goroutines with a context that ends
//     on Stop or when Start's context ends;
//   - a second Start changes nothing and returns ErrStarted;
//   - a Start after Stop changes nothing and returns ErrStopped;
//   - Stop cancels the goroutines and waits for them; it is safe before
//     Start and any number of times.
package lifecycle

import (
	"context"
	"errors"
	"sync"
)

var (
	// ErrStarted is returned by a second Start.
	ErrStarted = errors.New("already started")
	// ErrStopped is returned by Start after Stop (and by a part's calls
	// made after Stop, where it says so).
	ErrStopped = errors.New("stopped")
)

// Service is the Start/Stop state of one part. The zero value is ready to
// use; a Service must not be copied after first use.
type Service struct {
	mu      sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// Start calls init (when not nil) with the run context, under the
// Service's lock so that it cannot race with Stop, and then runs each of
// runs in its own goroutine with that context. An init error is returned
// and nothing runs; the Service counts as started all the same (Stop
// cleans up).
func (s *Service) Start(ctx context.Context, init func(context.Context) error, runs ...func(context.Context)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return ErrStopped
	}
	if s.started {
		return ErrStarted
	}
	s.started = true
	runCtx, cancel := context.WithCancel(ctx)
	s.cancel = cancel
	if init != nil {
		if err := init(runCtx); err != nil {
			return err
		}
	}
	for _, run := range runs {
		s.wg.Go(func() { run(runCtx) })
	}
	return nil
}

// Stop cancels the run context, calls interrupt (when not nil) to unblock
// goroutines stuck in I/O that ignores the context, and waits for them.
// It reports whether this call was the first Stop, so the caller releases
// its resources once.
func (s *Service) Stop(interrupt func()) bool {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return false
	}
	s.stopped = true
	cancel := s.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if interrupt != nil {
		interrupt()
	}
	s.wg.Wait()
	return true
}

// State reports whether Start ran and whether Stop was called.
func (s *Service) State() (started, stopped bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started, s.stopped
}

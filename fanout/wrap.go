package fanout

import (
	"context"
	"fmt"
	"sync"
)

// service is the Start/Stop state shared by the brokers: one start, any
// number of stops, background goroutines joined on stop.
type service struct {
	mu      sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// start calls init (when not nil) and then runs each of runs in its own
// goroutine with a context that ends on stop or when ctx ends; init runs
// under the service's lock, so it cannot race with stop. what names the
// caller in errors.
func (s *service) start(ctx context.Context, what string, init func(), runs ...func(context.Context)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return wrapf(what, ErrStopped)
	}
	if s.started {
		return wrapf(what, ErrAlreadyStarted)
	}
	s.started = true
	if init != nil {
		init()
	}
	runCtx, cancel := context.WithCancel(ctx)
	s.cancel = cancel
	for _, run := range runs {
		s.wg.Go(func() { run(runCtx) })
	}
	return nil
}

// stop cancels the goroutines, calls interrupt (when not nil) to unblock
// any of them stuck in I/O, and waits for them. It reports whether this call
// was the first stop, so the caller releases resources once.
func (s *service) stop(interrupt func()) bool {
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

// state reports whether start succeeded and whether stop was called.
func (s *service) state() (started, stopped bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started, s.stopped
}

func wrapf(what string, err error) error {
	return fmt.Errorf("fanout: %s: %w", what, err)
}

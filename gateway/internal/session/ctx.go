package session

import (
	"context"
	"slices"
	"sync"
	"time"
)

// connCtx is a connection's context (Conn.Ctx): cancelled once, by
// Conn.Cancel. The contexts derived from it for each hub or broker call
// register with it through AfterFunc, in a slice that is dropped once
// they are gone: a context.WithCancel parent would keep a map of its
// children, and its done channel, for the connection's lifetime, a few
// hundred bytes per connection for a few short calls.
type connCtx struct {
	done chan struct{}

	mu    sync.Mutex
	err   error
	after []*afterFunc // registered by AfterFunc, not yet run or stopped
}

// afterFunc is one function registered with AfterFunc.
type afterFunc struct{ f func() }

var _ context.Context = (*connCtx)(nil)

func newConnCtx() *connCtx { return &connCtx{done: make(chan struct{})} }

func (c *connCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *connCtx) Done() <-chan struct{}       { return c.done }
func (c *connCtx) Value(any) any               { return nil }

func (c *connCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// AfterFunc runs f on a goroutine of its own once c is cancelled (at once
// if it is); stop unregisters it, reporting whether that kept it from
// running. The context package uses it to cancel the contexts derived
// from c.
func (c *connCtx) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		go f()
		return func() bool { return false }
	}
	a := &afterFunc{f: f}
	c.after = append(c.after, a)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		i := slices.Index(c.after, a)
		if i < 0 {
			return false
		}
		c.after = slices.Delete(c.after, i, i+1)
		if len(c.after) == 0 {
			c.after = nil
		}
		return true
	}
}

// cancel cancels c: Done is closed, Err says context.Canceled, and what
// was registered with AfterFunc runs.
func (c *connCtx) cancel() {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = context.Canceled
	close(c.done)
	after := c.after
	c.after = nil
	c.mu.Unlock()
	for _, a := range after {
		go a.f()
	}
}

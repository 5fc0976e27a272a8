package storekit

import (
	"context"
	"sync"
)

// WakeHub fans an in-process "new records" signal out to every Wakeups
// channel of one store. Signals coalesce in a one-slot buffer.
type WakeHub struct {
	mu   sync.Mutex
	subs map[chan struct{}]struct{}
}

// Signal wakes one channel without blocking.
func Signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// add registers a new channel, already signalled so its owner drains the
// backlog first.
func (h *WakeHub) add() chan struct{} {
	ch := make(chan struct{}, 1)
	ch <- struct{}{}
	h.mu.Lock()
	if h.subs == nil {
		h.subs = make(map[chan struct{}]struct{})
	}
	h.subs[ch] = struct{}{}
	h.mu.Unlock()
	return ch
}

// remove unregisters ch and closes it.
func (h *WakeHub) remove(ch chan struct{}) {
	h.mu.Lock()
	delete(h.subs, ch)
	h.mu.Unlock()
	close(ch)
}

// Broadcast signals every registered channel.
func (h *WakeHub) Broadcast() {
	h.mu.Lock()
	for ch := range h.subs {
		Signal(ch)
	}
	h.mu.Unlock()
}

// Subscribe registers a channel that is removed and closed when ctx ends.
func (h *WakeHub) Subscribe(ctx context.Context) <-chan struct{} {
	ch := h.add()
	go func() {
		<-ctx.Done()
		h.remove(ch)
	}()
	return ch
}

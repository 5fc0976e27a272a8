package gateway

import (
	"sync"

	"github.com/heraldgw/herald/fanout"
)

// queueItemOverhead approximates the framing a transport adds to each
// publication (id line, field names, separators), so the byte bound holds
// for many tiny publications too.
const queueItemOverhead = 64

// sendQueue is a connection's bounded queue of publications waiting for the
// writer. push never blocks; a push beyond either bound fails and marks the
// queue overflowed, after which every push fails. Items taken by the writer
// keep counting against the bounds until the writer releases them, so the
// bounds cover the batch being written too.
type sendQueue struct {
	maxBytes int
	maxMsgs  int
	ready    chan struct{} // capacity 1: "items were pushed"

	mu         sync.Mutex
	items      []*fanout.Prepared
	bytes      int // queued and in flight
	count      int // queued and in flight
	overflowed bool
	closed     bool
}

func newSendQueue(maxBytes, maxMsgs int) *sendQueue {
	return &sendQueue{maxBytes: maxBytes, maxMsgs: maxMsgs, ready: make(chan struct{}, 1)}
}

// itemSize is what one publication counts against the byte bound.
func itemSize(p *fanout.Prepared) int { return p.Size() + queueItemOverhead }

// pushResult says what became of a push.
type pushResult int

const (
	pushed     pushResult = iota // queued
	pushClosed                   // the queue was closed; dropped silently
	pushFull                     // refused: a bound was hit, the queue is overflowed
)

// push enqueues p without blocking.
func (q *sendQueue) push(p *fanout.Prepared) pushResult {
	size := itemSize(p)
	q.mu.Lock()
	switch {
	case q.overflowed:
		q.mu.Unlock()
		return pushFull
	case q.closed:
		q.mu.Unlock()
		return pushClosed
	case q.count+1 > q.maxMsgs || q.bytes+size > q.maxBytes:
		q.overflowed = true
		q.items = nil // the connection is over; let the publications go
		q.mu.Unlock()
		return pushFull
	}
	q.items = append(q.items, p)
	q.bytes += size
	q.count++
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return pushed
}

// take moves every queued item into spare (emptied first) and returns it:
// the writer and the queue swap buffers, so a steady stream allocates
// nothing. The items keep counting against the bounds until release.
func (q *sendQueue) take(spare []*fanout.Prepared) []*fanout.Prepared {
	clear(spare)
	spare = spare[:0]
	q.mu.Lock()
	batch := q.items
	q.items = spare
	q.mu.Unlock()
	return batch
}

// release returns the bound taken by items the writer finished with.
func (q *sendQueue) release(items []*fanout.Prepared) {
	size := 0
	for _, p := range items {
		size += itemSize(p)
	}
	q.mu.Lock()
	q.bytes -= size
	q.count -= len(items)
	q.mu.Unlock()
}

// close makes every later push a silent no-op and drops what is queued.
func (q *sendQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.items = nil
	q.mu.Unlock()
}

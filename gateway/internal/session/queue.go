package session

import (
	"sync"

	"github.com/heraldgw/herald/fanout"
)

// queueItemOverhead approximates the framing a transport adds to each
// publication (id line, field names, separators), so the byte bound holds
// for many tiny publications too.
const queueItemOverhead = 64

// sendQueue is a connection's bounded queue of publications waiting for the
// writer. push never blocks; a push beyond either bound drops it and
// everything queued (every one of them is in its channel's history, which
// the writer then reads instead: the connection catches up). Items taken by
// the writer keep counting against the bounds until the writer releases
// them, so the bounds cover the batch being written too.
type sendQueue struct {
	maxBytes int
	maxMsgs  int
	ready    chan struct{} // capacity 1: "items were pushed"

	mu     sync.Mutex
	items  []*fanout.Prepared
	bytes  int // queued and in flight
	count  int // queued and in flight
	closed bool
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
	pushFull                     // a bound was hit: p and everything queued were dropped
)

// push enqueues p without blocking. On pushFull, dropped is how many
// publications it dropped, p included.
func (q *sendQueue) push(p *fanout.Prepared) (r pushResult, dropped int) {
	size := itemSize(p)
	q.mu.Lock()
	switch {
	case q.closed:
		q.mu.Unlock()
		return pushClosed, 0
	case q.count+1 > q.maxMsgs || q.bytes+size > q.maxBytes:
		dropped = len(q.items) + 1
		for _, it := range q.items {
			q.bytes -= itemSize(it)
		}
		q.count -= len(q.items)
		clear(q.items)
		q.items = q.items[:0]
		q.mu.Unlock()
		return pushFull, dropped
	}
	q.items = append(q.items, p)
	q.bytes += size
	q.count++
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return pushed, 0
}

// idle reports whether nothing is queued or being written, and the queue
// is open.
func (q *sendQueue) idle() bool {
	q.mu.Lock()
	idle := q.count == 0 && !q.closed
	q.mu.Unlock()
	return idle
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

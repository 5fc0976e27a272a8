package gateway

import (
	"sync"
	"time"

	"github.com/heraldgw/herald/fanout"
)

// wsItemKind says what a control item asks of the writer.
type wsItemKind uint8

const (
	itemFrame       wsItemKind = iota // write frame (a reply)
	itemPing                          // write the server's ping
	itemSubscribe                     // subscribe on the hub, recover, reply
	itemUnsubscribe                   // leave the hub, reply
	itemRevoke                        // leave the hub, push "unsubscribed"
	itemRefresh                       // push "refresh": a fresh token is due
)

// wsItem is one entry of a connection's control queue.
type wsItem struct {
	kind  wsItemKind
	frame []byte
	sub   *wsSubOp
	exp   time.Time // itemRefresh: the expiry of the current token
}

// wsSubOp is a subscription change for the writer to carry out.
type wsSubOp struct {
	id      uint64 // request id; 0 for a revocation
	channel string
	since   *fanout.Position // subscribe: resume position, nil = live
	reason  Reason           // revoke: why
	// subscribe: the subscription token and the authorization's lifetime
	// (Decision.RecheckAfter; 0 = as long as the connection token).
	subToken     string
	recheckAfter time.Duration
}

// ctlQueue holds a connection's replies, pings and subscription changes in
// order until the writer takes them. It is bounded like the publication
// queue (QueueMaxBytes, QueueMaxMessages): a client that sends requests
// without reading the replies is closed as slow.
type ctlQueue struct {
	maxBytes int
	maxMsgs  int

	mu     sync.Mutex
	items  []wsItem
	bytes  int
	closed bool
}

// push appends it without blocking.
func (q *ctlQueue) push(it wsItem) pushResult {
	size := len(it.frame) + queueItemOverhead
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.closed:
		return pushClosed
	case len(q.items)+1 > q.maxMsgs || q.bytes+size > q.maxBytes:
		return pushFull
	}
	q.items = append(q.items, it)
	q.bytes += size
	return pushed
}

// take moves every queued item into spare (emptied first) and returns it.
func (q *ctlQueue) take(spare []wsItem) []wsItem {
	clear(spare)
	spare = spare[:0]
	q.mu.Lock()
	items := q.items
	q.items = spare
	q.bytes = 0
	q.mu.Unlock()
	return items
}

// empty reports whether nothing is queued.
func (q *ctlQueue) empty() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items) == 0
}

// close refuses every later push and returns what was queued.
func (q *ctlQueue) close() []wsItem {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	items := q.items
	q.items = nil
	return items
}

// enqueue queues it for the writer and wakes it. It reports false when it
// was dropped: the connection is closing, or the queue overflowed (then
// the connection is closed as slow).
func (w *wsConn) enqueue(it wsItem) bool {
	switch w.ctl.push(it) {
	case pushed:
		w.wake()
		return true
	case pushFull:
		w.c.Close(withMessage(ReasonSlow, "replies were not read: the control queue is full"), 0)
	}
	return false
}

package gateway

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldgw/herald/fanout"
)

// ctlKind says what a control item asks of the writer.
type ctlKind uint8

const (
	ctlFrame       ctlKind = iota // write frame, a reply the transport encoded
	ctlRefresh                    // ask for a fresh token before exp
	ctlSubscribe                  // subscribe on the hub, recover, reply
	ctlUnsubscribe                // leave the hub, reply (the client asked)
	ctlEnd                        // leave the hub, tell the client (the server ended it for reason)
)

// ctlItem is one entry of a connection's control queue.
type ctlItem struct {
	kind    ctlKind
	frame   []byte    // ctlFrame
	exp     time.Time // ctlRefresh: the expiry of the current token
	id      uint64    // ctlSubscribe, ctlUnsubscribe: the request replied to
	channel string    // ctlSubscribe, ctlUnsubscribe, ctlEnd
	reason  *Reason   // ctlEnd: why
	sub     *subscribeReq
}

// subscribeReq is what a ctlSubscribe item subscribes with.
type subscribeReq struct {
	since *fanout.Position // resume position; nil: start live
	// subToken and recheckAfter are the subscription token and the
	// authorization's lifetime (Decision.RecheckAfter; 0: as long as the
	// connection's token).
	subToken     string
	recheckAfter time.Duration
	// done runs once the writer carried the subscription out (its reply
	// is written, or buffered to be).
	done func()
}

// ctlQueue holds a connection's control items in order until the writer
// takes them. It is bounded like the publication queue (QueueMaxBytes,
// QueueMaxMessages): a client that sends requests without reading the
// replies is closed as slow.
type ctlQueue struct {
	maxBytes int
	maxMsgs  int

	n atomic.Int32 // len(items), read without the lock by the writer's checks

	mu     sync.Mutex
	items  []ctlItem
	bytes  int
	closed bool
}

// push appends it without blocking.
func (q *ctlQueue) push(it ctlItem) pushResult {
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
	q.n.Store(int32(len(q.items)))
	return pushed
}

// take removes every queued item and returns them. Control items are
// few, so the queue keeps no buffer between them: an idle connection
// holds none.
func (q *ctlQueue) take() []ctlItem {
	if q.empty() {
		return nil // the writer's hot path: no lock
	}
	q.mu.Lock()
	items := q.items
	q.items = nil
	q.bytes = 0
	q.n.Store(0)
	q.mu.Unlock()
	return items
}

// empty reports whether nothing is queued.
func (q *ctlQueue) empty() bool { return q.n.Load() == 0 }

// close refuses every later push and returns what was queued.
func (q *ctlQueue) close() []ctlItem {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	items := q.items
	q.items = nil
	q.n.Store(0)
	return items
}

// pushCtl queues it for the writer and wakes it. It reports false when it
// was dropped: the connection is closing, or the queue overflowed (then
// the connection is closed as slow).
func (c *Conn) pushCtl(it ctlItem) bool {
	switch c.ctl.push(it) {
	case pushed:
		c.wake()
		return true
	case pushFull:
		c.Close(withMessage(ReasonSlow, "replies were not read: the control queue is full"), 0)
	}
	return false
}

// control carries out one control item (writer only).
func (c *Conn) control(it *ctlItem) error {
	s := c.out
	switch it.kind {
	case ctlFrame:
		return s.frame(it.frame)
	case ctlRefresh:
		return s.refreshRequest(it.exp)
	case ctlSubscribe:
		defer it.sub.done()
		return c.subscribeNow(it.id, it.channel, it.sub)
	case ctlUnsubscribe:
		c.leave(it.channel)
		return s.unsubscribed(it.id, it.channel, Reason{}, c.pos)
	case ctlEnd:
		if !c.leave(it.channel) {
			return nil
		}
		c.srv.metrics.subsEnded.WithLabelValues(c.transport, it.reason.Code).Inc()
		if c.closeWhenEmpty && len(c.keys) == 0 {
			c.Close(*it.reason, 0)
			return nil
		}
		return s.unsubscribed(0, it.channel, *it.reason, c.pos)
	}
	return nil
}

// subscribeNow subscribes on the hub, then recovers from the history
// (subscribe), and writes the reply followed by the recovered
// publications. Live publications queued meanwhile are written after
// them, admitted by position: no gap, no repeat.
func (c *Conn) subscribeNow(id uint64, channel string, req *subscribeReq) error {
	ctx, cancel := context.WithTimeout(c.ctx, hubCallTimeout)
	defer cancel()
	nkeys := len(c.keys)
	sub, err := c.subscribe(ctx, channel, req.since)
	if err != nil {
		if len(c.keys) > nkeys { // on the hub, but the history did not answer
			c.leaveHub(c.keys[nkeys])
			c.keys = c.keys[:nkeys]
		}
		c.forget(channel)
		if c.ctx.Err() != nil {
			return nil
		}
		c.srv.connLog.Log(slog.LevelError, "gateway: subscribe failed",
			slog.Uint64("conn", c.id), slog.String("channel", channel), slog.String("error", err.Error()))
		return c.out.subscribeFailed(id, channel)
	}
	c.track(channel, req.subToken, req.recheckAfter) // before the client may unsubscribe
	c.made(channel)
	if err := c.out.subscribed(id, sub, c.pos); err != nil {
		return err
	}
	_, err = c.writeRecovered(c.out, sub.pubs)
	return err
}

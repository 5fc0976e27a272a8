package session

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/subscriptions"
)

// CtlKind says what a control item asks of the writer.
type CtlKind uint8

const (
	CtlFrame       CtlKind = iota // write frame, a reply the transport encoded
	CtlRefresh                    // ask for a fresh token before exp
	CtlSubscribe                  // subscribe on the hub, recover, reply
	CtlUnsubscribe                // leave the hub, reply (the client asked)
	CtlEnd                        // leave the hub, tell the client (the server ended it for reason)
)

// CtlItem is one entry of a connection's control queue.
type CtlItem struct {
	Kind    CtlKind
	Frame   []byte    // ctlFrame
	Exp     time.Time // ctlRefresh: the expiry of the current token
	ID      uint64    // ctlSubscribe, ctlUnsubscribe: the request replied to
	Channel string    // ctlSubscribe, ctlUnsubscribe, ctlEnd
	Reason  *Reason   // ctlEnd: why
	Sub     *SubscribeReq
}

// SubscribeReq is what a ctlSubscribe item subscribes with.
type SubscribeReq struct {
	Since *fanout.Position // resume position; nil: start live
	// SubToken and Decision are the subscription token and the decision
	// that allowed the subscription: what it rests on (Conn.Track).
	SubToken string
	Decision subscriptions.Decision
	// Done runs once the writer carried the subscription out (its reply
	// is written, or buffered to be).
	Done func()
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
	items  []CtlItem
	bytes  int
	closed bool
}

// push appends it without blocking.
func (q *ctlQueue) push(it CtlItem) pushResult {
	size := len(it.Frame) + queueItemOverhead
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
func (q *ctlQueue) take() []CtlItem {
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
func (q *ctlQueue) close() []CtlItem {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	items := q.items
	q.items = nil
	q.n.Store(0)
	return items
}

// PushCtl queues it for the writer and wakes it. It reports false when it
// was dropped: the connection is closing, or the queue overflowed (then
// the connection is closed as slow).
func (c *Conn) PushCtl(it CtlItem) bool {
	switch c.ctl.push(it) {
	case pushed:
		c.wake()
		return true
	case pushFull:
		c.Close(WithMessage(ReasonSlow, "replies were not read: the control queue is full"), 0)
	}
	return false
}

// control carries out one control item (writer only).
func (c *Conn) control(it *CtlItem) error {
	s := c.Out
	switch it.Kind {
	case CtlFrame:
		return s.Frame(it.Frame)
	case CtlRefresh:
		return s.RefreshRequest(it.Exp)
	case CtlSubscribe:
		defer it.Sub.Done()
		return c.subscribeNow(it.ID, it.Channel, it.Sub)
	case CtlUnsubscribe:
		c.leave(it.Channel)
		return s.Unsubscribed(it.ID, it.Channel, Reason{}, c.Pos)
	case CtlEnd:
		if !c.leave(it.Channel) {
			return nil
		}
		c.env.Counters.SubsEnded.WithLabelValues(c.Transport, it.Reason.Code).Inc()
		if c.CloseWhenEmpty && len(c.keys) == 0 {
			c.Close(*it.Reason, 0)
			return nil
		}
		return s.Unsubscribed(0, it.Channel, *it.Reason, c.Pos)
	}
	return nil
}

// subscribeNow subscribes on the hub, then recovers from the history
// (subscribe), and writes the reply followed by the recovered
// publications. Live publications queued meanwhile are written after
// them, admitted by position: no gap, no repeat.
func (c *Conn) subscribeNow(id uint64, channel string, req *SubscribeReq) error {
	ctx, cancel := context.WithTimeout(c.Ctx, hubCallTimeout)
	defer cancel()
	nkeys := len(c.keys)
	sub, err := c.Subscribe(ctx, channel, req.Since)
	if err != nil {
		if len(c.keys) > nkeys { // on the hub, but the history did not answer
			c.leaveHub(c.keys[nkeys])
			c.keys = c.keys[:nkeys]
		}
		c.Forget(channel)
		if c.Ctx.Err() != nil {
			return nil
		}
		c.env.Log.Log(slog.LevelError, "gateway: subscribe failed",
			slog.Uint64("conn", c.ID), slog.String("channel", channel), slog.String("error", err.Error()))
		return c.Out.SubscribeFailed(id, channel)
	}
	c.Track(channel, req.SubToken, req.Decision) // before the client may unsubscribe
	c.made(channel)
	if err := c.Out.Subscribed(id, sub, c.Pos); err != nil {
		return err
	}
	_, err = c.WriteRecovered(c.Out, sub.Pubs)
	return err
}

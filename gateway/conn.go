package gateway

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/fanout"
)

// finalWriteTimeout bounds writing the last event of a closing connection.
const finalWriteTimeout = 2 * time.Second

// hubCallTimeout bounds one hub or history call the writer makes for a
// subscription change.
const hubCallTimeout = 5 * time.Second

// Conn is one realtime connection, whatever its transport: its
// subscriptions and their positions, its bounded queue, its control queue,
// its revalidation state and why it closed. The hub delivers to it through
// Deliver, which never blocks; one writer (conn_writer.go) drains both
// queues into the transport's sink, the only thing it knows of the
// transport.
type Conn struct {
	srv       *Server
	id        uint64
	transport string // the metric label: transportSSE or transportWS
	claims    *auth.Claims
	queue     *sendQueue
	pos       *positions // writer only
	keys      []fanout.Key
	opened    time.Time
	remote    string // the client's address (clientOf), for logs

	deliveries interface{ Add(float64) } // herald_deliveries_total{transport}

	// cur holds the claims of the connection's current token: set when
	// the connection is authenticated (an SSE request, a WebSocket's
	// connect), replaced by a refresh; nil before.
	cur atomic.Pointer[auth.Claims]
	// closeWhenEmpty ends the connection with its last subscription (a
	// stream whose channels are fixed when it opens). tickExpiry leaves
	// the token's expiry to the revalidation tick; otherwise the
	// transport runs a timer of its own. Both are set before the
	// connection is shared.
	closeWhenEmpty bool
	tickExpiry     bool

	// The writer (conn_writer.go). out is the transport's sink, set before
	// the writer may start.
	out       sink
	ctx       context.Context // the writer's hub and broker calls; cancelled once the connection closes
	cancel    context.CancelFunc
	writing   atomic.Bool // a writer runs, the transport holds it off, or the final frames were written
	beatDue   atomic.Bool // a heartbeat is to be written
	beatMu    sync.Mutex  // guards beat against finish
	beat      *time.Timer // HeartbeatInterval, from startHeartbeat
	broken    bool        // writer only: a write failed, the stream is not intact
	finalDone chan struct{}

	// ctl is the one control queue: replies, token refresh requests and
	// subscription changes, in order (conn_ctl.go).
	ctl ctlQueue

	abortMu sync.Mutex
	abortFn func()

	resyncMu   sync.Mutex
	resyncKeys []fanout.Key
	resyncCh   chan struct{} // capacity 1: "resyncKeys is not empty, or lagging is set"
	// lagging is set when the queue hit its bound and dropped what it
	// held: the writer then reads every channel forward from the history.
	lagging atomic.Bool
	// written holds, per channel, the offset of the last publication the
	// writer handed to the transport (*atomic.Uint64), so Deliver can tell
	// a connection that fell behind the history (Config.HistorySize).
	written sync.Map
	// catchingUp is set (by the writer, which alone touches it) while the
	// connection reads the history after lagging; a channel whose history
	// no longer reaches back to its position then ends the connection as
	// slow.
	catchingUp bool

	// subsMu guards subs: the subscriptions a client asked for by request
	// (conn_subs.go); nil for a stream subscribed when it opened.
	subsMu sync.Mutex
	subs   map[string]*clientSub

	// revalMu guards the revalidation state below.
	revalMu  sync.Mutex
	askedExp time.Time           // the exp a fresh token was last asked for
	rechecks map[string]*recheck // subscriptions whose authorization lapses

	// userKey is the user whose MaxConnectionsPerUser slot the connection
	// holds, when hasUserSlot; only the connection's handler touches them.
	userKey     string
	hasUserSlot bool

	closeOnce sync.Once
	done      chan struct{}
	reason    Reason        // set before done is closed
	delay     time.Duration // reconnect delay to announce; set before done is closed
}

// newConn returns a connection whose writer is held off until the
// transport calls startWriting.
func (s *Server) newConn(transport string, claims *auth.Claims, remote string) *Conn {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Conn{
		srv:       s,
		id:        s.nextConnID.Add(1),
		transport: transport,
		claims:    claims,
		queue:     newSendQueue(s.cfg.QueueMaxBytes, s.cfg.QueueMaxMessages),
		pos:       newPositions(claims.Tenant, 4),
		opened:    time.Now(),
		remote:    remote,
		ctx:       ctx,
		cancel:    cancel,
		finalDone: make(chan struct{}),
		ctl:       ctlQueue{maxBytes: s.cfg.QueueMaxBytes, maxMsgs: s.cfg.QueueMaxMessages},
		done:      make(chan struct{}),
		resyncCh:  make(chan struct{}, 1),

		deliveries: s.metrics.deliveries.WithLabelValues(transport),
	}
	c.writing.Store(true)
	return c
}

var _ fanout.ResyncSubscriber = (*Conn)(nil)

// Deliver implements fanout.Subscriber: a non-blocking enqueue. A full
// queue drops what it holds and the connection catches up: its writer
// reads every channel forward from the history, at the pace the client
// reads, and rejoins the live stream (lag).
func (c *Conn) Deliver(p *fanout.Prepared) {
	switch r, dropped := c.queue.push(p); r {
	case pushFull:
		c.srv.metrics.queueDropped.Add(float64(dropped))
		if c.behindHistory(p) {
			c.Close(ReasonSlow, 0)
			return
		}
		c.lag()
	case pushed:
		c.wake()
	}
}

// behindHistory reports whether the connection is further behind on p's
// channel than the history reaches (Config.HistorySize).
func (c *Conn) behindHistory(p *fanout.Prepared) bool {
	n := c.srv.cfg.HistorySize
	if n <= 0 {
		return false
	}
	v, ok := c.written.Load(p.Key().Channel)
	return ok && p.Position().Offset > v.(*atomic.Uint64).Load()+uint64(n)
}

// noteWritten records that the publication of channel at offset was handed
// to the transport (or that the channel's subscription starts there).
func (c *Conn) noteWritten(channel string, offset uint64) {
	if c.srv.cfg.HistorySize <= 0 {
		return
	}
	v, ok := c.written.Load(channel)
	if !ok {
		v, _ = c.written.LoadOrStore(channel, new(atomic.Uint64))
	}
	v.(*atomic.Uint64).Store(offset)
}

// lag makes the writer read every channel from the history, from the last
// position it wrote: the queue dropped publications that are all there.
func (c *Conn) lag() {
	if !c.lagging.Swap(true) {
		c.srv.metrics.catchUps.WithLabelValues(c.transport).Inc()
		c.srv.connLog.Log(slog.LevelInfo, "gateway: connection fell behind its send queue; catching up from the history",
			slog.Uint64("conn", c.id), slog.String("transport", c.transport))
	}
	c.signalResync()
}

// signalResync tells the writer that there is history to read.
func (c *Conn) signalResync() {
	select {
	case c.resyncCh <- struct{}{}:
	default:
	}
	c.wake()
}

// requestResync has the writer read key from the history; only the
// writer calls it (it found a gap, or a page that was full).
func (c *Conn) requestResync(key fanout.Key) {
	c.resyncMu.Lock()
	if !slices.Contains(c.resyncKeys, key) {
		c.resyncKeys = append(c.resyncKeys, key)
	}
	c.resyncMu.Unlock()
	select {
	case c.resyncCh <- struct{}{}:
	default:
	}
}

// Resync implements fanout.ResyncSubscriber: publications of key may have
// been lost on their way to this node. It never blocks; the writer recovers
// the channel from the last position it wrote and drops repeats by offset,
// or closes the connection with ReasonInsufficientState when the history
// cannot fill the gap.
func (c *Conn) Resync(key fanout.Key) {
	if key.Tenant != c.claims.Tenant {
		return
	}
	c.resyncMu.Lock()
	if !slices.Contains(c.resyncKeys, key) {
		c.resyncKeys = append(c.resyncKeys, key)
	}
	c.resyncMu.Unlock()
	c.signalResync()
}

// Close ends the connection for r, announcing delay as the reconnect delay
// where the transport can still say so. The first call decides the reason;
// later calls do nothing. It never blocks.
func (c *Conn) Close(r Reason, delay time.Duration) {
	c.closeOnce.Do(func() {
		c.reason, c.delay = r, delay
		c.queue.close()
		close(c.done)
		if r.Code == ReasonSlow.Code {
			c.srv.metrics.limit(limitQueue)
			c.abortMu.Lock()
			if c.abortFn != nil {
				c.abortFn()
			}
			c.abortMu.Unlock()
		}
		c.wake()
	})
}

// hardClose closes the connection for r and, where the transport can,
// tears it down at once without waiting for a final frame.
func (c *Conn) hardClose(r Reason) {
	c.Close(r, 0)
	c.out.kill()
}

// Done is closed once the connection is closing; Reason is then valid.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Reason is why the connection closed; valid once Done is closed.
func (c *Conn) Reason() Reason {
	<-c.done
	return c.reason
}

func (c *Conn) closed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// setAbort installs the transport's abort before the connection can be
// closed as slow; setAbort(nil) before the transport's writer is gone waits
// for an abort in progress, so none reaches a finished response.
func (c *Conn) setAbort(f func()) {
	c.abortMu.Lock()
	c.abortFn = f
	c.abortMu.Unlock()
}

// subscription is the outcome of subscribing a connection to one channel.
type subscription struct {
	channel string
	// recovered is true when since was given and the history held every
	// publication after it; pubs then holds them, in order.
	recovered bool
	// why says why it did not recover (when !recovered).
	why  recoveryReason
	pubs []fanout.Publication
	// top is the channel's position when the subscription began.
	top fanout.Position
}

// noEpoch is an epoch no broker produces: recovering from it yields the
// channel's top and no publications.
const noEpoch = "\x00herald-live"

// subscribe subscribes the connection to channel on the hub and only then
// asks the broker for history, so a publication is either in the recovered
// history, in the queue, or in both (the writer drops the repeat); never in
// neither. since == nil starts live. The writer must not run concurrently.
func (c *Conn) subscribe(ctx context.Context, channel string, since *fanout.Position) (subscription, error) {
	key := fanout.Key{Tenant: c.claims.Tenant, Channel: channel}
	if err := c.srv.deps.Hub.Subscribe(ctx, key, c); err != nil {
		return subscription{}, err
	}
	c.keys = append(c.keys, key)
	ask := fanout.Position{Epoch: noEpoch}
	if since != nil {
		ask = *since
	}
	rec, err := c.srv.deps.Broker.Recover(ctx, key, ask, 0)
	if err != nil {
		return subscription{}, err
	}
	sub := subscription{channel: channel, top: rec.Top}
	if since != nil && rec.Recovered {
		sub.recovered, sub.pubs = true, rec.Publications
		c.pos.add(channel, *since)
		c.noteWritten(channel, since.Offset)
	} else {
		sub.why = notRecovered(since, rec)
		c.pos.add(channel, rec.Top)
		c.noteWritten(channel, rec.Top.Offset)
	}
	return sub, nil
}

// unsubscribeAll removes the connection from the hub.
func (c *Conn) unsubscribeAll() {
	for _, k := range c.keys {
		c.leaveHub(k)
	}
	c.keys = nil
}

// leave ends the subscription to channel on the writer's side: it leaves
// the hub and stops tracking the channel, so nothing of it follows (writer
// only). It reports false when the channel was not subscribed.
func (c *Conn) leave(channel string) bool {
	key := fanout.Key{Tenant: c.claims.Tenant, Channel: channel}
	i := slices.Index(c.keys, key)
	if i < 0 {
		return false
	}
	c.keys = slices.Delete(c.keys, i, i+1)
	c.pos.remove(channel)
	c.written.Delete(channel)
	c.untrack(channel)
	c.leaveHub(key)
	return true
}

// leaveHub unsubscribes the connection from key on the hub.
func (c *Conn) leaveHub(key fanout.Key) {
	ctx, cancel := context.WithTimeout(context.Background(), hubCallTimeout)
	defer cancel()
	if err := c.srv.deps.Hub.Unsubscribe(ctx, key, c); err != nil {
		c.srv.connLog.Log(slog.LevelWarn, "gateway: unsubscribe failed",
			slog.Uint64("conn", c.id), slog.String("channel", key.Channel), slog.String("error", err.Error()))
	}
}

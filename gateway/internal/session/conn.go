package session

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

// FinalWriteTimeout bounds writing the last event of a closing connection.
const FinalWriteTimeout = 2 * time.Second

// hubCallTimeout bounds one hub or history call the writer makes for a
// subscription change.
const hubCallTimeout = 5 * time.Second

// Conn is one realtime connection, whatever its transport: its
// subscriptions and their positions, its bounded queue, its control queue,
// its revalidation state and why it closed. The hub delivers to it through
// Deliver, which never blocks; one writer drains both
// queues into the transport's sink, the only thing it knows of the
// transport.
type Conn struct {
	env       *Env
	ID        uint64
	Transport string // the metric label: transportSSE or transportWS
	Claims    *auth.Claims
	queue     *sendQueue
	Pos       *Positions // writer only
	keys      []fanout.Key
	Opened    time.Time
	Remote    string // the client's address (clientOf), for logs

	deliveries interface{ Add(float64) } // herald_deliveries_total{transport}

	// Cur holds the claims of the connection's current token: set when
	// the connection is authenticated (an SSE request, a WebSocket's
	// connect), replaced by a refresh; nil before.
	Cur atomic.Pointer[auth.Claims]
	// CloseWhenEmpty ends the connection with its last subscription (a
	// stream whose channels are fixed when it opens); set before the
	// connection is shared. The token's expiry runs on a timer of the
	// transport's own.
	CloseWhenEmpty bool

	// The writer. Out is the transport's sink, set before
	// the writer may start.
	Out       Sink
	Ctx       context.Context // the writer's hub and broker calls; cancelled once the connection closes
	Cancel    context.CancelFunc
	writing   atomic.Bool // a writer runs, the transport holds it off, or the final frames were written
	closing   atomic.Bool // done is closed, or about to be: Closed, read beside writing
	beatDue   atomic.Bool // a heartbeat is to be written
	beatMu    sync.Mutex  // guards beat against finish
	beat      *time.Timer // HeartbeatInterval, from startHeartbeat
	broken    bool        // writer only: a write failed, the stream is not intact
	FinalDone chan struct{}

	// ctl is the one control queue: replies, token refresh requests and
	// subscription changes, in order.
	ctl ctlQueue

	abortMu sync.Mutex
	abortFn func()

	resyncMu   sync.Mutex
	resyncKeys []fanout.Key
	resyncCh   chan struct{} // capacity 1: "resyncKeys is not empty, or lagging is set"
	// lagging is set when the queue hit its bound and dropped what it
	// held: the writer then reads every channel forward from the history.
	lagging atomic.Bool
	// unsent is set (by whoever holds the writer's place) when a direct
	// write left bytes the socket could not take: the writer sends them
	// first, under its write timeout.
	unsent bool
	// one is the batch of a direct write (writer's place only).
	one [1]*fanout.Prepared
	// catchingUp is set (by the writer, which alone touches it) while the
	// connection reads the history after lagging; a channel whose history
	// no longer reaches back to its position then ends the connection as
	// slow.
	catchingUp bool

	// subsMu guards subs: the subscriptions a client asked for by request;
	// nil for a stream subscribed when it opened.
	subsMu sync.Mutex
	subs   subSet

	// revalMu guards the revalidation state below.
	revalMu      sync.Mutex
	askedExp     time.Time           // the exp a fresh token was last asked for
	rechecks     map[string]*Recheck // what subscriptions rest on beyond the token
	revalStopped bool                // the connection ended: no timer is armed

	// UserKey is the user whose MaxConnectionsPerUser slot the connection
	// holds, when hasUserSlot; only the connection's handler touches them.
	UserKey     string
	HasUserSlot bool

	closeOnce sync.Once
	done      chan struct{}
	reason    Reason        // set before done is closed
	delay     time.Duration // reconnect delay to announce; set before done is closed
}

// New returns connection id of env, for transport (its metric label),
// authenticated with claims, from the client address remote. Its writer
// is held off until the transport calls StartWriting.
func New(env *Env, id uint64, transport string, claims *auth.Claims, remote string) *Conn {
	ctx := newConnCtx()
	b := &env.Bounds
	c := &Conn{
		env:       env,
		ID:        id,
		Transport: transport,
		Claims:    claims,
		queue:     newSendQueue(b.QueueMaxBytes, b.QueueMaxMessages),
		Pos:       NewPositions(claims.Tenant, 4),
		Opened:    time.Now(),
		Remote:    remote,
		Ctx:       ctx,
		Cancel:    ctx.cancel,
		FinalDone: make(chan struct{}),
		ctl:       ctlQueue{maxBytes: b.QueueMaxBytes, maxMsgs: b.QueueMaxMessages},
		done:      make(chan struct{}),
		resyncCh:  make(chan struct{}, 1),

		deliveries: env.Counters.Deliveries.WithLabelValues(transport),
	}
	c.writing.Store(true)
	return c
}

var _ fanout.ResyncSubscriber = (*Conn)(nil)

// Deliver implements fanout.Subscriber; it never blocks. When no writer
// runs and nothing waits to be written, it takes the writer's place and
// writes p to the socket itself, without waiting for it (deliverDirect).
// Otherwise it enqueues p: a full queue drops what it holds and the
// connection catches up: its writer reads every channel forward from the
// history, at the pace the client reads, and rejoins the live stream
// (lag).
func (c *Conn) Deliver(p *fanout.Prepared) {
	if c.writing.CompareAndSwap(false, true) {
		c.deliverDirect(p)
		return
	}
	if c.enqueue(p) {
		c.wake()
	}
}

var _ fanout.RunSubscriber = (*Conn)(nil)

// DeliverRun implements fanout.RunSubscriber: a run of one channel's
// publications, in offset order, as Deliver would take them one after
// the other, except that a direct write sends the whole run in one write
// (deliverDirectRun) and a writer is woken once for it.
func (c *Conn) DeliverRun(run []*fanout.Prepared) {
	if len(run) == 1 {
		c.Deliver(run[0])
		return
	}
	if c.writing.CompareAndSwap(false, true) {
		c.deliverDirectRun(run)
		return
	}
	wake := false
	for _, p := range run {
		if c.enqueue(p) {
			wake = true
		}
	}
	if wake {
		c.wake()
	}
}

// enqueue queues p, and reports whether a writer is to be woken for it.
func (c *Conn) enqueue(p *fanout.Prepared) bool {
	switch r, dropped := c.queue.push(p); r {
	case pushFull:
		c.env.Counters.QueueDropped.Add(float64(dropped))
		if c.behindHistory(p) {
			c.Close(ReasonSlow, 0)
			return false
		}
		c.lag()
	case pushed:
		return true
	}
	return false
}

// behindHistory reports whether the connection is further behind on p's
// channel than the history reaches (Config.HistorySize).
func (c *Conn) behindHistory(p *fanout.Prepared) bool {
	n := c.env.Bounds.HistorySize
	if n <= 0 {
		return false
	}
	off, ok := c.Pos.Written(p.Key().Channel)
	return ok && p.Position().Offset > off+uint64(n)
}

// lag makes the writer read every channel from the history, from the last
// position it wrote: the queue dropped publications that are all there.
func (c *Conn) lag() {
	if !c.lagging.Swap(true) {
		c.env.Counters.CatchUps.WithLabelValues(c.Transport).Inc()
		c.env.Log.Log(slog.LevelInfo, "gateway: connection fell behind its send queue; catching up from the history",
			slog.Uint64("conn", c.ID), slog.String("transport", c.Transport))
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
// the channel from the last position it wrote and drops repeats by offset
// (a channel whose epoch changed meanwhile: its new epoch from its first
// publication, readHistory), or closes the connection with
// ReasonInsufficientState when the history cannot fill the gap.
func (c *Conn) Resync(key fanout.Key) {
	if key.Tenant != c.Claims.Tenant {
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
		c.closing.Store(true)
		close(c.done)
		if r.Code == ReasonSlow.Code {
			c.env.Counters.QueueLimit.Inc()
			c.abortMu.Lock()
			if c.abortFn != nil {
				c.abortFn()
			}
			c.abortMu.Unlock()
		}
		c.wake()
	})
}

// HardClose closes the connection for r and, where the transport can,
// tears it down at once without waiting for a final frame.
func (c *Conn) HardClose(r Reason) {
	c.Close(r, 0)
	c.Out.Kill()
}

// Bounds are the limits of every connection of the server; read only.
func (c *Conn) Bounds() *Bounds { return &c.env.Bounds }

// Done is closed once the connection is closing; Reason is then valid.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Reason is why the connection closed; valid once Done is closed.
func (c *Conn) Reason() Reason {
	<-c.done
	return c.reason
}

// Closed reports whether the connection is closing; Reason is then
// valid. It reads a flag beside the writer's, not the done channel,
// which the hub's side would otherwise fetch from memory for each
// delivery.
func (c *Conn) Closed() bool { return c.closing.Load() }

// SetAbort installs the transport's abort before the connection can be
// closed as slow; setAbort(nil) before the transport's writer is gone waits
// for an abort in progress, so none reaches a finished response.
func (c *Conn) SetAbort(f func()) {
	c.abortMu.Lock()
	c.abortFn = f
	c.abortMu.Unlock()
}

// Subscription is the outcome of subscribing a connection to one channel.
type Subscription struct {
	Channel string
	// Recovered is true when since was given and the history held every
	// publication after it; pubs then holds them, in order.
	Recovered bool
	// Why says why it did not recover (when !recovered).
	Why  RecoveryReason
	Pubs []fanout.Publication
	// Top is the channel's position when the subscription began.
	Top fanout.Position
}

// noEpoch is an epoch no broker produces: recovering from it yields the
// channel's top and no publications.
const NoEpoch = "\x00herald-live"

// Subscribe subscribes the connection to channel on the hub and only then
// asks the broker for history, so a publication is either in the recovered
// history, in the queue, or in both (the writer drops the repeat); never in
// neither. since == nil starts live. The writer must not run concurrently.
func (c *Conn) Subscribe(ctx context.Context, channel string, since *fanout.Position) (Subscription, error) {
	key := fanout.Key{Tenant: c.Claims.Tenant, Channel: channel}
	if err := c.env.Hub.Subscribe(ctx, key, c); err != nil {
		return Subscription{}, err
	}
	c.keys = append(c.keys, key)
	ask := fanout.Position{Epoch: NoEpoch}
	if since != nil {
		ask = *since
	}
	rec, err := c.env.History.Recover(ctx, key, ask, 0)
	if err != nil {
		return Subscription{}, err
	}
	sub := Subscription{Channel: channel, Top: rec.Top}
	if since != nil && rec.Recovered {
		sub.Recovered, sub.Pubs = true, rec.Publications
		c.Pos.Add(channel, *since)
	} else {
		sub.Why = notRecovered(since, rec)
		c.Pos.Add(channel, rec.Top)
	}
	return sub, nil
}

// UnsubscribeAll removes the connection from the hub, and stops the
// timers of its subscriptions' credentials.
func (c *Conn) UnsubscribeAll() {
	c.stopRechecks()
	for _, k := range c.keys {
		c.leaveHub(k)
	}
	c.keys = nil
}

// leave ends the subscription to channel on the writer's side: it leaves
// the hub and stops tracking the channel, so nothing of it follows (writer
// only). It reports false when the channel was not subscribed.
func (c *Conn) leave(channel string) bool {
	key := fanout.Key{Tenant: c.Claims.Tenant, Channel: channel}
	i := slices.Index(c.keys, key)
	if i < 0 {
		return false
	}
	c.keys = slices.Delete(c.keys, i, i+1)
	c.Pos.Remove(channel)
	c.untrack(channel)
	c.leaveHub(key)
	return true
}

// leaveHub unsubscribes the connection from key on the hub.
func (c *Conn) leaveHub(key fanout.Key) {
	ctx, cancel := context.WithTimeout(context.Background(), hubCallTimeout)
	defer cancel()
	if err := c.env.Hub.Unsubscribe(ctx, key, c); err != nil {
		c.env.Log.Log(slog.LevelWarn, "gateway: unsubscribe failed",
			slog.Uint64("conn", c.ID), slog.String("channel", key.Channel), slog.String("error", err.Error()))
	}
}

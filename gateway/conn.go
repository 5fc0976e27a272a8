package gateway

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/fanout"
)

// finalWriteTimeout bounds writing the last event of a closing connection.
const finalWriteTimeout = 2 * time.Second

// sink is what a transport gives the connection core: buffered writes of the
// transport's frames, a flush, and a deadline. Only the connection's writer
// calls its methods, except abort.
type sink interface {
	// setDeadline sets the deadline of the writes and flush that follow.
	setDeadline(t time.Time) error
	// publication buffers one publication; pos already includes it.
	publication(p *fanout.Prepared, pos *positions) error
	// heartbeat buffers a keep-alive frame.
	heartbeat() error
	// final buffers the last frames of a connection closed for r, telling the
	// client whether and when (delay) to reconnect.
	final(r Reason, delay time.Duration) error
	// refreshRequest buffers the request for a fresh token before exp.
	refreshRequest(exp time.Time) error
	// unsubscribed buffers the end of one subscription for r; pos no
	// longer holds its channel.
	unsubscribed(channel string, r Reason, pos *positions) error
	// flush sends what is buffered.
	flush() error
	// abort interrupts a write blocked on the client. Any goroutine may call
	// it; the frame being written is lost, so nothing more is written after.
	abort()
}

// Conn is one realtime connection, whatever its transport. The hub delivers
// to it through Deliver, which never blocks; one writer drains its queue.
type Conn struct {
	srv       *Server
	id        uint64
	transport string
	claims    *auth.Claims
	queue     *sendQueue
	pos       *positions // writer only
	keys      []fanout.Key
	opened    time.Time
	remote    string // the client's address (clientOf), for logs

	deliveries interface{ Add(float64) } // herald_deliveries_total{transport}

	// wake, when set, is called after a publication or a control event
	// was queued, after Resync and once on Close, so the transport can
	// start its writer on demand. It must not block. Set before the
	// connection is shared.
	wake func()
	// kill, when set, tears the connection down at once; Stop calls it on
	// connections that outlive ShutdownTimeout.
	kill func()

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

	// hooks lets the revalidation timer reach the transport; set before
	// the connection is registered.
	hooks connHooks
	// revalMu guards the revalidation state below.
	revalMu  sync.Mutex
	askedExp time.Time           // the exp a fresh token was last asked for
	rechecks map[string]*recheck // subscriptions whose authorization lapses

	// ctl holds control events for the core writer (SSE): a reauth request
	// or the end of one subscription. ctlCh is nil for transports with a
	// writer of their own.
	ctlMu sync.Mutex
	ctl   []connCtl
	ctlCh chan struct{} // capacity 1: "ctl is not empty"

	// userKey is the user whose MaxConnectionsPerUser slot the connection
	// holds, when hasUserSlot; only the connection's handler touches them.
	userKey     string
	hasUserSlot bool

	closeOnce sync.Once
	done      chan struct{}
	reason    Reason        // set before done is closed
	delay     time.Duration // reconnect delay to announce; set before done is closed
}

func (s *Server) newConn(transport string, claims *auth.Claims, remote string) *Conn {
	return &Conn{
		srv:       s,
		id:        s.nextConnID.Add(1),
		transport: transport,
		claims:    claims,
		queue:     newSendQueue(s.cfg.QueueMaxBytes, s.cfg.QueueMaxMessages),
		pos:       newPositions(claims.Tenant, 4),
		opened:    time.Now(),
		remote:    remote,
		done:      make(chan struct{}),
		resyncCh:  make(chan struct{}, 1),

		deliveries: s.metrics.deliveries.WithLabelValues(transport),
	}
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
		if c.wake != nil {
			c.wake()
		}
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
	if c.wake != nil {
		c.wake()
	}
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
		if c.wake != nil {
			c.wake()
		}
	})
}

// hardClose closes the connection for r and, where the transport can,
// tears it down at once without waiting for a final frame.
func (c *Conn) hardClose(r Reason) {
	c.Close(r, 0)
	if c.kill != nil {
		c.kill()
	}
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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, k := range c.keys {
		if err := c.srv.deps.Hub.Unsubscribe(ctx, k, c); err != nil {
			c.srv.connLog.Log(slog.LevelWarn, "gateway: unsubscribe failed",
				slog.Uint64("conn", c.id), slog.String("channel", k.Channel), slog.String("error", err.Error()))
		}
	}
	c.keys = nil
}

// writer drains the connection's queue into s until the connection closes
// or ctx (the client's request) ends: it takes everything queued, writes it
// as one batch under one deadline, and flushes only when the queue is empty.
// It also writes heartbeats and the control events of the revalidation
// timer (which also closes the connection when its token runs out). On
// exit it writes the final frames when the stream is intact.
func (c *Conn) writer(ctx context.Context, s sink) {
	cfg := &c.srv.cfg
	heartbeat := time.NewTicker(cfg.HeartbeatInterval)
	defer heartbeat.Stop()

	var batch []*fanout.Prepared
	intact := true
	for intact && !c.closed() {
		var err error
		select {
		case <-ctx.Done():
			c.Close(ReasonClientClosed, 0)
			return
		case <-c.done:
		case <-c.queue.ready:
			batch, err = c.drain(s, batch)
		case <-c.resyncCh:
			err = c.resync(ctx, s)
		case <-heartbeat.C:
			err = c.heartbeat(s)
		case <-c.ctlCh:
			err = c.control(ctx, s)
		}
		if err != nil {
			intact = false
			c.Close(writeErrorReason(ctx, err), 0)
		}
	}
	if !intact || !c.reason.tellsClient() {
		return
	}
	t := min(cfg.WriteTimeout, finalWriteTimeout)
	if s.setDeadline(time.Now().Add(t)) == nil && s.final(c.reason, c.delay) == nil {
		_ = s.flush()
	}
}

// heartbeat writes and flushes a keep-alive frame under its own deadline.
func (c *Conn) heartbeat(s sink) error {
	if err := s.setDeadline(time.Now().Add(c.srv.cfg.WriteTimeout)); err != nil {
		return err
	}
	if err := s.heartbeat(); err != nil {
		return err
	}
	return s.flush()
}

// drain writes batches until the queue is empty, then flushes.
func (c *Conn) drain(s sink, spare []*fanout.Prepared) ([]*fanout.Prepared, error) {
	written := false
	for !c.closed() {
		batch := c.queue.take(spare)
		spare = batch
		if len(batch) == 0 {
			if written {
				return spare, s.flush()
			}
			return spare, nil
		}
		if err := s.setDeadline(time.Now().Add(c.srv.cfg.WriteTimeout)); err != nil {
			return spare, err
		}
		n, err := c.writeLive(s, batch)
		c.queue.release(batch)
		if err != nil {
			return spare, err
		}
		written = written || n > 0
	}
	return spare, nil
}

// writeLive buffers the publications of batch (taken from the queue) the
// client does not have yet, in order, and returns how many it wrote. One
// that comes after a gap in its channel is not written: the channel is read
// from the history instead (resync), which holds it too.
func (c *Conn) writeLive(s sink, batch []*fanout.Prepared) (int, error) {
	n := 0
	defer func() { c.deliveries.Add(float64(n)) }()
	for _, p := range batch {
		switch c.pos.admitNext(p.Key(), p.Position()) {
		case admitRepeat:
			continue
		case admitGap:
			c.requestResync(p.Key())
			continue
		}
		if err := s.publication(p, c.pos); err != nil {
			return n, err
		}
		c.noteWritten(p.Key().Channel, p.Position().Offset)
		n++
	}
	return n, nil
}

// catchUpPage is how many publications the writer reads from a channel's
// history at a time: half the queue bound, so catching up holds no more
// than the queue would.
func (c *Conn) catchUpPage() int { return max(1, c.srv.cfg.QueueMaxMessages/2) }

// resync reads channels forward from the history, from the last position
// written to the client, a page at a time: every channel after the queue
// dropped publications (lagging), and the channels Resync named or a gap
// or a full page left to read. A channel with more to read is asked again,
// so the live queue and the other channels are served in between.
func (c *Conn) resync(ctx context.Context, s sink) error {
	c.resyncMu.Lock()
	keys := c.resyncKeys
	c.resyncKeys = nil
	c.resyncMu.Unlock()
	if c.lagging.Swap(false) {
		c.catchingUp = true
		keys = keys[:0]
		for _, ch := range c.pos.names {
			keys = append(keys, fanout.Key{Tenant: c.claims.Tenant, Channel: ch})
		}
	}
	page := c.catchUpPage()
	written := false
	for _, key := range keys {
		i, ok := c.pos.index[key.Channel]
		if !ok {
			continue
		}
		rec, err := c.srv.deps.Broker.Recover(ctx, key, c.pos.entries[i].pos, page)
		if err != nil && ctx.Err() != nil {
			c.Close(ReasonClientClosed, 0)
			return nil
		}
		if err != nil {
			c.srv.connLog.Log(slog.LevelError, "gateway: resync recover failed",
				slog.Uint64("conn", c.id), slog.String("channel", key.Channel), slog.String("error", err.Error()))
			c.Close(ReasonServerError, 0)
			return nil
		}
		if !rec.Recovered {
			if c.catchingUp {
				// It fell further behind than the history reaches.
				c.Close(ReasonSlow, 0)
			} else {
				c.Close(ReasonInsufficientState, 0)
			}
			return nil
		}
		if len(rec.Publications) == page {
			c.requestResync(key)
		}
		if len(rec.Publications) == 0 {
			continue
		}
		if err := s.setDeadline(time.Now().Add(c.srv.cfg.WriteTimeout)); err != nil {
			return err
		}
		n, err := c.writeRecovered(s, rec.Publications)
		if err != nil {
			return err
		}
		written = written || n > 0
	}
	if c.catchingUp && !c.lagging.Load() {
		c.resyncMu.Lock()
		if len(c.resyncKeys) == 0 {
			c.catchingUp = false
		}
		c.resyncMu.Unlock()
	}
	if written {
		return s.flush()
	}
	return nil
}

// writeRecovered buffers the recovered publications the client does not
// have yet, in order, and returns how many it wrote.
func (c *Conn) writeRecovered(s sink, pubs []fanout.Publication) (int, error) {
	n := 0
	for i := range pubs {
		p := &pubs[i]
		if !c.pos.admit(p.Key, p.Position) {
			continue
		}
		if err := s.publication(fanout.NewPrepared(*p), c.pos); err != nil {
			c.deliveries.Add(float64(n))
			return n, err
		}
		c.noteWritten(p.Key.Channel, p.Offset)
		n++
	}
	c.deliveries.Add(float64(n))
	return n, nil
}

// writeErrorReason classifies a failed write.
func writeErrorReason(ctx context.Context, err error) Reason {
	switch {
	case ctx.Err() != nil:
		return ReasonClientClosed
	case errors.Is(err, os.ErrDeadlineExceeded):
		return ReasonWriteTimeout
	}
	return ReasonClientClosed
}

// tellsClient reports whether a connection closed for r gets a final event.
func (r Reason) tellsClient() bool {
	return r.Code != ReasonClientClosed.Code && r.Code != ReasonWriteTimeout.Code
}

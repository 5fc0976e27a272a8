package session

import "github.com/heraldgw/herald/fanout"

// DirectSink is a Sink that can send what it buffered without waiting for
// the socket, so the hub's side may write a publication itself
// (deliverDirect) instead of waking the connection's writer for it.
type DirectSink interface {
	Sink
	// Direct reports whether p, framed alone, can be sent by TryFlush
	// (a stream that left net/http; a message that is not too large);
	// when false, p goes to the writer.
	Direct(p *fanout.Prepared) bool
	// TryFlush sends what is buffered without blocking, and reports
	// whether all of it went out. What the socket did not take is kept
	// and sent first by the next Flush, under the deadline Arm sets.
	TryFlush() (bool, error)
}

// deliverDirect writes p from the hub's side. The caller took the
// writer's place (writing), so no writer runs and every publication
// handed to the connection before p was written, or is queued: p is
// written only when nothing is queued, no control item, resync or
// heartbeat waits, and no earlier direct write left bytes behind; then
// it goes through the writer's own checks (writeLive: repeats, gaps),
// framed by the sink exactly as the writer would, and leaves in one
// non-blocking write. Otherwise, and for what the socket did not take,
// the writer takes over, as it would have without the direct write.
// Either way the connection's bounds and order hold: a socket that
// cannot take the bytes leaves them to the writer, which sends them
// under its write timeout, and what follows queues behind them; what is
// left is never more than one publication that fits the queue's byte
// bound (a larger one goes to the queue, which refuses it, and the
// connection reads it from the history).
func (c *Conn) deliverDirect(p *fanout.Prepared) {
	d, ok := c.Out.(DirectSink)
	if !ok || c.env.Bounds.QueuedOnly || !c.directReady() || itemSize(p) > c.env.Bounds.QueueMaxBytes || !d.Direct(p) {
		c.enqueue(p)
		c.handOff()
		return
	}
	c.one[0] = p
	_, err := c.writeLive(d, c.one[:])
	c.one[0] = nil // while the place is held: the next holder writes it
	c.flushDirect(d, err)
}

// writeDirect frames batch (writeLive) and sends it in one non-blocking
// write, leaving what the socket did not take to the writer (unsent),
// then gives up the writer's place (handOff). The caller holds the place.
func (c *Conn) writeDirect(d DirectSink, batch []*fanout.Prepared) {
	_, err := c.writeLive(d, batch)
	c.flushDirect(d, err)
}

// flushDirect ends a direct write whose framing returned err: it sends
// what was framed in one non-blocking write, leaving what the socket did
// not take to the writer (unsent), then gives up the writer's place.
func (c *Conn) flushDirect(d DirectSink, err error) {
	if err == nil {
		var sent bool
		sent, err = d.TryFlush()
		c.unsent = !sent
	}
	if err != nil {
		c.fail(err)
	}
	c.handOff()
}

// directRunBytes bounds the run a direct write sends at once, counted as
// the queue counts it (itemSize): well inside one batch of either
// transport (64 KiB), so framing the run never makes the sink write on
// its own, which could block.
const directRunBytes = 16 << 10

// deliverDirectRun writes a run of one channel's publications from the
// hub's side as deliverDirect writes one: only when the connection could
// take each of them directly, and the run fits directRunBytes and the
// queue's bounds; then all of them are framed and leave in one
// non-blocking write, and the writer takes over what the socket did not
// take. Otherwise they are queued, in order, as Deliver queues them.
func (c *Conn) deliverDirectRun(run []*fanout.Prepared) {
	d, ok := c.Out.(DirectSink)
	ok = ok && !c.env.Bounds.QueuedOnly && len(run) <= c.env.Bounds.QueueMaxMessages && c.directReady()
	size := 0
	for _, p := range run {
		size += itemSize(p)
	}
	ok = ok && size <= min(directRunBytes, c.env.Bounds.QueueMaxBytes)
	for i := 0; ok && i < len(run); i++ {
		ok = d.Direct(run[i])
	}
	if !ok {
		for _, p := range run {
			c.enqueue(p)
		}
		c.handOff()
		return
	}
	c.writeDirect(d, run)
}

// directReady reports whether a publication may be written from the
// hub's side: nothing is pending for the writer (the caller holds its
// place).
func (c *Conn) directReady() bool {
	return !c.unsent && !c.Closed() && !c.lagging.Load() && !c.catchingUp &&
		c.queue.idle() && len(c.resyncCh) == 0 && !c.beatDue.Load() && c.ctl.empty()
}

// handOff gives up the writer's place taken for a direct write, and
// starts the writer if anything is pending, as the writer does when it
// finishes. When the direct write left bytes behind, or the connection
// is closing, the place goes straight to the writer.
func (c *Conn) handOff() {
	if c.unsent || c.Closed() {
		c.env.Writers.Run(c)
		return
	}
	c.writing.Store(false)
	if c.pending() && c.writing.CompareAndSwap(false, true) {
		c.env.Writers.Run(c)
	}
}

package gateway

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/heraldgw/herald/fanout"
)

// sink is what a transport gives the connection core: it frames what the
// writer hands it in the transport's own way, buffers it and sends it.
// Only the connection's writer calls its methods, except kill.
type sink interface {
	// arm starts the write timeout (Config.WriteTimeout) of the batch that
	// follows.
	arm() error
	// setDeadline bounds every write that follows by t (the final frames).
	setDeadline(t time.Time) error
	// publication buffers one publication; pos already includes it.
	publication(p *fanout.Prepared, pos *positions) error
	// heartbeat buffers a keep-alive frame.
	heartbeat() error
	// refreshRequest buffers the request for a fresh token before exp.
	refreshRequest(exp time.Time) error
	// subscribed buffers the start of a subscription: the reply to request
	// id, or with id 0 the event of a stream that subscribed as it opened;
	// pos holds the channel.
	subscribed(id uint64, sub subscription, pos *positions) error
	// subscribeFailed buffers the refusal of request id to subscribe to
	// channel: the hub or the history did not answer.
	subscribeFailed(id uint64, channel string) error
	// unsubscribed buffers the end of one subscription: the reply to
	// request id, or with id 0 the server's notice that it ended it for r;
	// pos no longer holds its channel.
	unsubscribed(id uint64, channel string, r Reason, pos *positions) error
	// frame buffers a frame the transport encoded already (a reply).
	frame(b []byte) error
	// final buffers the last frames of a connection closed for r, telling
	// the client whether and when (delay) to reconnect.
	final(r Reason, delay time.Duration) error
	// flush sends what is buffered.
	flush() error
	// close ends the connection once the writer is done: intact says the
	// final frames went out, so the transport may end it cleanly.
	close(r Reason, intact bool)
	// kill drops the connection at once; any goroutine may call it.
	kill()
}

// The writer. A connection has at most one writer at a time, started on
// demand (wake) whenever something is queued, on a goroutine of the
// server's writerPool, and gone again once nothing is left, so an idle
// connection holds no writer. It is the one drain loop of every
// transport:
//
//   - each round takes everything queued (control items, publications, a
//     resync the history owes, a heartbeat that is due), writes it in
//     that order as one batch under one write timeout, and goes round
//     again until nothing is left; only then does it flush;
//   - once the connection is closing it writes the replies still queued
//     and the final frames, when the stream is intact and the reason is
//     worth telling, and closes the transport (finish); writing then
//     stays set, so no writer ever starts again.

// wake makes sure a writer runs for what is pending, and once the
// connection is closing, stops its hub and broker calls. It never blocks;
// the hub calls it on its delivery path.
func (c *Conn) wake() {
	if c.closed() {
		c.cancel()
	}
	if c.writing.CompareAndSwap(false, true) {
		c.srv.writers.run(c)
	}
}

// startWriting lets writers start, once the transport is ready (the head
// of an SSE stream is written; a WebSocket is attached), and starts one
// if anything is pending already.
func (c *Conn) startWriting() {
	c.writing.Store(false)
	if c.pending() {
		c.wake()
	}
}

// pending reports whether the writer has work.
func (c *Conn) pending() bool {
	return c.closed() || len(c.queue.ready) > 0 || len(c.resyncCh) > 0 || c.beatDue.Load() || !c.ctl.empty()
}

// startHeartbeat has the writer send a keep-alive frame every
// HeartbeatInterval from now on.
func (c *Conn) startHeartbeat() {
	c.beatMu.Lock()
	defer c.beatMu.Unlock()
	if c.beat == nil && !c.closed() {
		c.beat = time.AfterFunc(c.srv.cfg.HeartbeatInterval, c.heartbeatDue)
	}
}

// heartbeatDue has the writer send a heartbeat, and re-arms the timer.
func (c *Conn) heartbeatDue() {
	if c.closed() {
		return
	}
	c.beatDue.Store(true)
	c.wake()
	c.beatMu.Lock()
	if !c.closed() {
		c.beat.Reset(c.srv.cfg.HeartbeatInterval)
	}
	c.beatMu.Unlock()
}

// stopHeartbeat stops the timer for good (the connection is closing).
func (c *Conn) stopHeartbeat() {
	c.beatMu.Lock()
	if c.beat != nil {
		c.beat.Stop()
	}
	c.beatMu.Unlock()
}

// writeLoop is the writer (a writerJob): it writes what is pending until
// nothing is, and exits, unless something arrived meanwhile.
func (c *Conn) writeLoop() {
	for {
		if c.closed() {
			c.finish()
			return
		}
		if err := c.pump(); err != nil {
			c.fail(err)
			continue
		}
		if c.closed() {
			continue
		}
		c.writing.Store(false)
		if !c.pending() || !c.writing.CompareAndSwap(false, true) {
			return
		}
	}
}

// pump writes rounds until nothing is left, then flushes. Only the writer
// receives from the signal channels, so one that is not empty is received
// from without blocking, and without the cost of a select. What is still
// buffered when the connection closes is left for finish.
func (c *Conn) pump() error {
	var spare []*fanout.Prepared
	wrote := false
	for !c.closed() {
		items := c.ctl.take()
		batch := c.queue.take(spare)
		if len(batch) == 0 && signalled(c.queue.ready) {
			// Take the signal only with the queue found empty, and look
			// again: a push that came in between has signalled. While
			// publications flow the signal stays set, and neither a push
			// nor a round touches the channel.
			batch = c.queue.take(batch)
		}
		resync := signalled(c.resyncCh)
		beat := c.beatDue.Load() && c.beatDue.Swap(false)
		if len(items) == 0 && len(batch) == 0 && !resync && !beat {
			break
		}
		wrote = true
		err := c.round(items, batch, resync, beat)
		c.queue.release(batch)
		spare = batch
		if err != nil {
			return err
		}
	}
	if wrote && !c.closed() {
		return c.out.flush()
	}
	return nil
}

// round writes one batch: control items first, then the publications
// taken from the queue, then what the history owes, then a heartbeat.
func (c *Conn) round(items []ctlItem, batch []*fanout.Prepared, resync, beat bool) error {
	s := c.out
	if err := s.arm(); err != nil {
		return err
	}
	for i := range items {
		if err := c.control(&items[i]); err != nil {
			return err
		}
		if c.closed() {
			return nil
		}
	}
	if _, err := c.writeLive(s, batch); err != nil {
		return err
	}
	// A gap in batch asked for a resync: it is read in this round.
	if resync || signalled(c.resyncCh) {
		if err := c.resync(s); err != nil {
			return err
		}
	}
	if beat {
		return s.heartbeat()
	}
	return nil
}

// signalled takes the signal from ch, a channel of capacity 1 that only
// the caller receives from, and reports whether there was one.
func signalled(ch chan struct{}) bool {
	if len(ch) == 0 {
		return false
	}
	<-ch
	return true
}

// fail closes the connection after a failed write; nothing more is
// written to it.
func (c *Conn) fail(err error) {
	c.broken = true
	c.Close(writeErrorReason(c.ctx, err), 0)
}

// finish ends the connection: when the stream is intact and the reason is
// worth telling, it writes the replies still queued and the final frames
// under a short deadline; then the transport closes the connection.
func (c *Conn) finish() {
	defer close(c.finalDone)
	c.cancel()
	c.stopHeartbeat()
	items := c.ctl.close()
	s := c.out
	intact := !c.broken && c.reason.tellsClient()
	if intact {
		err := s.setDeadline(time.Now().Add(min(c.srv.cfg.WriteTimeout, finalWriteTimeout)))
		for i := 0; i < len(items) && err == nil; i++ {
			if items[i].kind == ctlFrame {
				err = s.frame(items[i].frame)
			}
		}
		if err == nil {
			err = s.final(c.reason, c.delay)
		}
		if err == nil {
			err = s.flush()
		}
		intact = err == nil
	}
	s.close(c.reason, intact)
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
func (c *Conn) resync(s sink) error {
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
	for _, key := range keys {
		i, ok := c.pos.index[key.Channel]
		if !ok {
			continue
		}
		rec, err := c.srv.deps.Broker.Recover(c.ctx, key, c.pos.entries[i].pos, page)
		if err != nil && c.ctx.Err() != nil {
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
		if err := s.arm(); err != nil {
			return err
		}
		if _, err := c.writeRecovered(s, rec.Publications); err != nil {
			return err
		}
	}
	if c.catchingUp && !c.lagging.Load() {
		c.resyncMu.Lock()
		if len(c.resyncKeys) == 0 {
			c.catchingUp = false
		}
		c.resyncMu.Unlock()
	}
	return nil
}

// writeRecovered buffers the recovered publications the client does not
// have yet, in order, and returns how many it wrote.
func (c *Conn) writeRecovered(s sink, pubs []fanout.Publication) (int, error) {
	n := 0
	defer func() { c.deliveries.Add(float64(n)) }()
	for i := range pubs {
		p := &pubs[i]
		if !c.pos.admit(p.Key, p.Position) {
			continue
		}
		if err := s.publication(fanout.NewPrepared(*p), c.pos); err != nil {
			return n, err
		}
		c.noteWritten(p.Key.Channel, p.Offset)
		n++
	}
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

package session

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/heraldgw/herald/fanout"
)

// Sink is what a transport gives the connection core: it frames what the
// writer hands it in the transport's own way, buffers it and sends it.
// Only the connection's writer calls its methods, except kill.
type Sink interface {
	// Arm starts the write timeout (Config.WriteTimeout) of the batch that
	// follows.
	Arm() error
	// SetDeadline bounds every write that follows by t (the final frames).
	SetDeadline(t time.Time) error
	// Publication buffers one publication; pos already includes it.
	Publication(p *fanout.Prepared, pos *Positions) error
	// Heartbeat buffers a keep-alive frame.
	Heartbeat() error
	// RefreshRequest buffers the request for a fresh token before exp.
	RefreshRequest(exp time.Time) error
	// Subscribed buffers the start of a subscription: the reply to request
	// id, or with id 0 the event of a stream that subscribed as it opened;
	// pos holds the channel.
	Subscribed(id uint64, sub Subscription, pos *Positions) error
	// SubscribeFailed buffers the refusal of request id to subscribe to
	// channel for r: with r zero, the hub or the history did not answer;
	// otherwise the token current when the writer came to it does not
	// allow the channel, or could not be checked.
	SubscribeFailed(id uint64, channel string, r Reason) error
	// Unsubscribed buffers the end of one subscription: the reply to
	// request id, or with id 0 the server's notice that it ended it for r;
	// pos no longer holds its channel.
	Unsubscribed(id uint64, channel string, r Reason, pos *Positions) error
	// Frame buffers a frame the transport encoded already (a reply).
	Frame(b []byte) error
	// Final buffers the last frames of a connection closed for r, telling
	// the client whether and when (delay) to reconnect.
	Final(r Reason, delay time.Duration) error
	// Flush sends what is buffered.
	Flush() error
	// Close ends the connection once the writer is done: intact says the
	// final frames went out, so the transport may end it cleanly.
	Close(r Reason, intact bool)
	// Kill drops the connection at once; any goroutine may call it.
	Kill()
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
//
// The writer's place (writing) is also what a direct write takes: the
// hub's side, finding no writer running and nothing pending, writes a
// publication itself without blocking (deliverDirect) and starts the
// writer only for what the socket did not take. Whoever holds the place
// is the one writer.

// wake makes sure a writer runs for what is pending, and once the
// connection is closing, stops its hub and broker calls. It never blocks;
// the hub calls it on its delivery path.
func (c *Conn) wake() {
	if c.Closed() {
		c.Cancel()
	}
	if c.writing.CompareAndSwap(false, true) {
		c.env.Writers.Run(c)
	}
}

// StartWriting lets writers start, once the transport is ready (the head
// of an SSE stream is written; a WebSocket is attached), and starts one
// if anything is pending already.
func (c *Conn) StartWriting() {
	c.writing.Store(false)
	if c.pending() {
		c.wake()
	}
}

// pending reports whether the writer has work.
func (c *Conn) pending() bool {
	return c.Closed() || len(c.queue.ready) > 0 || len(c.resyncCh) > 0 || c.beatDue.Load() || !c.ctl.empty()
}

// StartHeartbeat has the writer send a keep-alive frame every
// HeartbeatInterval from now on.
func (c *Conn) StartHeartbeat() {
	c.beatMu.Lock()
	defer c.beatMu.Unlock()
	if c.beat == nil && !c.Closed() {
		c.beat = time.AfterFunc(c.env.Bounds.HeartbeatInterval, c.heartbeatDue)
	}
}

// heartbeatDue has the writer send a heartbeat, and re-arms the timer.
func (c *Conn) heartbeatDue() {
	if c.Closed() {
		return
	}
	c.Beat()
	c.beatMu.Lock()
	if !c.Closed() {
		c.beat.Reset(c.env.Bounds.HeartbeatInterval)
	}
	c.beatMu.Unlock()
}

// Beat has the writer send a keep-alive frame now: for a transport that
// times its heartbeats on a timer of its own (a WebSocket's one timer)
// rather than StartHeartbeat's.
func (c *Conn) Beat() {
	if !c.Closed() {
		c.beatDue.Store(true)
		c.wake()
	}
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
		if c.Closed() {
			c.finish()
			return
		}
		if err := c.pump(); err != nil {
			c.fail(err)
			continue
		}
		if c.Closed() {
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
	if c.unsent && !c.Closed() {
		// A direct write left bytes behind: they go first, under the
		// write timeout (Flush, below, or a batch's write).
		c.unsent = false
		if err := c.Out.Arm(); err != nil {
			return err
		}
		wrote = true
	}
	for !c.Closed() {
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
	if wrote && !c.Closed() {
		return c.Out.Flush()
	}
	return nil
}

// round writes one batch: control items first, then the publications
// taken from the queue, then what the history owes, then a heartbeat.
func (c *Conn) round(items []CtlItem, batch []*fanout.Prepared, resync, beat bool) error {
	s := c.Out
	if err := s.Arm(); err != nil {
		return err
	}
	for i := range items {
		if err := c.control(&items[i]); err != nil {
			return err
		}
		if c.Closed() {
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
		return s.Heartbeat()
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
	c.Close(WriteErrorReason(c.Ctx, err), 0)
}

// finish ends the connection: when the stream is intact and the reason is
// worth telling, it writes the replies still queued and the final frames
// under a short deadline; then the transport closes the connection.
func (c *Conn) finish() {
	defer close(c.FinalDone)
	c.Cancel()
	c.stopHeartbeat()
	items := c.ctl.close()
	s := c.Out
	intact := !c.broken && c.reason.tellsClient()
	if intact {
		err := s.SetDeadline(time.Now().Add(min(c.env.Bounds.WriteTimeout, FinalWriteTimeout)))
		for i := 0; i < len(items) && err == nil; i++ {
			if items[i].Kind == CtlFrame {
				err = s.Frame(items[i].Frame)
			}
		}
		if err == nil {
			err = s.Final(c.reason, c.delay)
		}
		if err == nil {
			err = s.Flush()
		}
		intact = err == nil
	}
	s.Close(c.reason, intact)
}

// writeLive buffers the publications of batch (taken from the queue) the
// client does not have yet, in order, and returns how many it wrote. One
// that comes after a gap in its channel is not written: the channel is read
// from the history instead (resync), which holds it too.
func (c *Conn) writeLive(s Sink, batch []*fanout.Prepared) (int, error) {
	if len(batch) == 0 {
		return 0, nil
	}
	c.Pos.Took()
	n := 0
	defer func() { c.deliveries.Add(float64(n)) }()
	for _, p := range batch {
		switch c.Pos.AdmitNext(p.Key(), p.Position()) {
		case AdmitRepeat:
			continue
		case AdmitGap:
			c.requestResync(p.Key())
			continue
		}
		if err := s.Publication(p, c.Pos); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// catchUpPage is how many publications the writer reads from a channel's
// history at a time: half the queue bound, so catching up holds no more
// than the queue would.
func (c *Conn) catchUpPage() int { return max(1, c.env.Bounds.QueueMaxMessages/2) }

// resync reads channels forward from the history, from the last position
// written to the client, a page at a time: every channel after the queue
// dropped publications (lagging), and the channels Resync named or a gap
// or a full page left to read. A channel with more to read is asked again,
// so the live queue and the other channels are served in between.
func (c *Conn) resync(s Sink) error {
	c.resyncMu.Lock()
	keys := c.resyncKeys
	c.resyncKeys = nil
	c.resyncMu.Unlock()
	if c.lagging.Swap(false) {
		c.catchingUp = true
		keys = keys[:0]
		for _, ch := range c.Pos.names {
			keys = append(keys, fanout.Key{Tenant: c.Claims.Tenant, Channel: ch})
		}
	}
	page := c.catchUpPage()
	for _, key := range keys {
		i, ok := c.Pos.find(key.Channel)
		if !ok {
			continue
		}
		rec, ok := c.readHistory(key, c.Pos.Entries[i].Pos, page)
		if !ok {
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
		if err := s.Arm(); err != nil {
			return err
		}
		if _, err := c.WriteRecovered(s, rec.Publications); err != nil {
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

// readHistory reads a page of key's history after pos. When the
// channel's epoch changed since pos (its history was lost or replaced:
// idle past the history TTL, evicted, lost by the broker) and the new
// epoch has publications, it reads the new epoch from its first one: the
// client learns of the change from the new epoch of what is written, as
// from a live publication of it, and gets every publication of the new
// epoch in order. It reports false when it closed the connection.
func (c *Conn) readHistory(key fanout.Key, pos fanout.Position, page int) (fanout.Recovery, bool) {
	rec, ok := c.recoverPage(key, pos, page)
	if ok && !rec.Recovered && rec.Top.Epoch != pos.Epoch && rec.Top.Offset > 0 {
		rec, ok = c.recoverPage(key, fanout.Position{Epoch: rec.Top.Epoch}, page)
	}
	return rec, ok
}

// recoverPage asks the history for a page of key after pos. It reports
// false when the history failed, having closed the connection.
func (c *Conn) recoverPage(key fanout.Key, pos fanout.Position, page int) (fanout.Recovery, bool) {
	rec, err := c.env.History.Recover(c.Ctx, key, pos, page)
	switch {
	case err != nil && c.Ctx.Err() != nil:
		c.Close(ReasonClientClosed, 0)
		return rec, false
	case err != nil:
		c.env.Log.Log(slog.LevelError, "gateway: resync recover failed",
			slog.Uint64("conn", c.ID), slog.String("channel", key.Channel), slog.String("error", err.Error()))
		c.Close(ReasonServerError, 0)
		return rec, false
	}
	return rec, true
}

// WriteRecovered buffers the recovered publications the client does not
// have yet, in order, and returns how many it wrote.
func (c *Conn) WriteRecovered(s Sink, pubs []fanout.Publication) (int, error) {
	n := 0
	defer func() { c.deliveries.Add(float64(n)) }()
	for i := range pubs {
		p := &pubs[i]
		if !c.Pos.Admit(p.Key, p.Position) {
			continue
		}
		if err := s.Publication(fanout.NewPrepared(*p), c.Pos); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// WriteErrorReason classifies a failed write.
func WriteErrorReason(ctx context.Context, err error) Reason {
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

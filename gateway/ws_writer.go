package gateway

import (
	"context"
	"log/slog"
	"time"

	"github.com/heraldgw/herald/fanout"
)

// hubCallTimeout bounds one hub or history call the writer makes for a
// subscription change.
const hubCallTimeout = 5 * time.Second

// wake makes sure a writer runs for what was queued, and once the
// connection is closing, stops its requests. It never blocks; the hub
// calls it on its delivery path.
func (w *wsConn) wake() {
	if w.c.closed() {
		w.cancel()
	}
	if w.writing.CompareAndSwap(false, true) {
		w.srv.writers.run(w)
	}
}

// writeLoop is the writer: it drains the queues until they are empty and
// exits, unless something arrived meanwhile. Once the connection is
// closing it writes the final frames, closes the WebSocket and keeps
// w.writing set, so no writer ever starts again.
func (w *wsConn) writeLoop() {
	for {
		if w.c.closed() {
			w.finish()
			return
		}
		w.drain()
		if w.c.closed() {
			continue
		}
		w.sink.release()
		w.writing.Store(false)
		if !w.pending() || !w.writing.CompareAndSwap(false, true) {
			return
		}
	}
}

// pending reports whether the writer has work.
func (w *wsConn) pending() bool {
	c := w.c
	return c.closed() || len(c.queue.ready) > 0 || !w.ctl.empty() || len(c.resyncCh) > 0
}

// drain writes what is queued, control items first, then publications,
// then a resync, until nothing is left or the connection closes; it
// flushes when the queues are empty. Frames still buffered when the
// connection closes are left for finish.
func (w *wsConn) drain() {
	c, s := w.c, &w.sink
	var spare []*fanout.Prepared
	var items []wsItem
	for !c.closed() {
		s.limit = time.Time{}
		select {
		case <-c.queue.ready:
		default:
		}
		batch := c.queue.take(spare)
		items = w.ctl.take(items)
		resync := len(c.resyncCh) > 0
		if len(batch) == 0 && len(items) == 0 && !resync {
			break
		}
		for i := range items {
			if err := w.handleItem(&items[i]); err != nil {
				c.queue.release(batch)
				w.fail(err)
				return
			}
		}
		_, err := c.writeLive(s, batch)
		c.queue.release(batch)
		if err != nil {
			w.fail(err)
			return
		}
		spare = batch
		// A gap in batch asked for a resync: do it in this round.
		resync = resync || len(c.resyncCh) > 0
		if resync {
			<-c.resyncCh // only the writer receives: it cannot block
			if err := c.resync(w.ctx, s); err != nil {
				w.fail(err)
				return
			}
		}
	}
	if !c.closed() {
		if err := s.flush(); err != nil {
			w.fail(err)
		}
	}
}

// handleItem carries out one control item.
func (w *wsConn) handleItem(it *wsItem) error {
	switch it.kind {
	case itemFrame:
		return w.sink.frame(nil, it.frame)
	case itemPing:
		return w.sink.heartbeat()
	case itemRefresh:
		return w.sink.refreshRequest(it.exp)
	case itemSubscribe:
		return w.doSubscribe(it.sub)
	case itemUnsubscribe, itemRevoke:
		return w.doUnsubscribe(it.sub, it.kind == itemRevoke)
	}
	return nil
}

// doSubscribe subscribes on the hub, then recovers from history (Conn.subscribe),
// and writes the reply followed by the recovered publications. Live
// publications queued meanwhile are written after them, admitted by
// position: no gap, no repeat.
func (w *wsConn) doSubscribe(op *wsSubOp) error {
	defer w.requestDone(op.id)
	c := w.c
	ctx, cancel := context.WithTimeout(w.ctx, hubCallTimeout)
	defer cancel()
	nkeys := len(c.keys)
	sub, err := c.subscribe(ctx, op.channel, op.since)
	if err != nil {
		if len(c.keys) > nkeys { // on the hub, but the history did not answer
			w.leaveHub(c.keys[nkeys])
			c.keys = c.keys[:nkeys]
		}
		w.forget(op.channel)
		if w.ctx.Err() != nil {
			return nil
		}
		w.logError("gateway: websocket subscribe failed", err, slog.String("channel", op.channel))
		w.srv.metrics.wsRequests.WithLabelValues(opSubscribe, codeServerError).Inc()
		return w.sink.frame(nil, encodeError(op.id, codeServerError, "cannot subscribe now: the broker did not answer; retry later"))
	}
	c.track(op.channel, op.subToken, op.recheckAfter) // before the client may unsubscribe
	w.subscribed(op.channel)
	w.srv.metrics.wsRequests.WithLabelValues(opSubscribe, "ok").Inc()
	err = w.sink.frame(nil, encodeResult(op.id, wsSubscribeResult{
		Channel: op.channel, Recovered: sub.recovered, Reason: sub.why.Code, Offset: sub.top.Offset, Epoch: sub.top.Epoch,
	}))
	if err != nil {
		return err
	}
	_, err = c.writeRecovered(&w.sink, sub.pubs)
	return err
}

// doUnsubscribe leaves the hub for a channel and stops writing it, then
// replies (unsubscribe) or pushes "unsubscribed" (revoke).
func (w *wsConn) doUnsubscribe(op *wsSubOp, revoked bool) error {
	c := w.c
	key := fanout.Key{Tenant: c.claims.Tenant, Channel: op.channel}
	w.leaveHub(key)
	for i, k := range c.keys {
		if k == key {
			c.keys = append(c.keys[:i], c.keys[i+1:]...)
			break
		}
	}
	c.pos.remove(op.channel)
	c.written.Delete(op.channel)
	if revoked {
		w.srv.metrics.subsEnded.WithLabelValues(c.transport, op.reason.Code).Inc()
		return w.sink.unsubscribed(op.channel, op.reason, c.pos)
	}
	w.srv.metrics.wsRequests.WithLabelValues(opUnsubscribe, "ok").Inc()
	return w.sink.frame(nil, encodeResult(op.id, wsEmpty{}))
}

// leaveHub unsubscribes the connection from key on the hub.
func (w *wsConn) leaveHub(key fanout.Key) {
	ctx, cancel := context.WithTimeout(context.Background(), hubCallTimeout)
	defer cancel()
	if err := w.srv.deps.Hub.Unsubscribe(ctx, key, w.c); err != nil {
		w.logError("gateway: unsubscribe failed", err, slog.String("channel", key.Channel))
	}
}

// fail closes the connection after a failed write; nothing more is
// written to it.
func (w *wsConn) fail(error) {
	w.broken = true
	r := ReasonClientClosed
	if w.sink.timedOut.Load() {
		r = ReasonWriteTimeout
	}
	w.c.Close(r, 0)
}

// finish ends the connection: when the stream is intact and the reason is
// worth telling, it writes the queued replies and a disconnect push under
// a short deadline, then closes with the reason's close code (the close
// handshake waits at most a few seconds for the client, and not at all
// for one closed for a timeout); otherwise it drops the TCP connection.
func (w *wsConn) finish() {
	defer close(w.finalDone)
	defer w.sink.release()
	w.cancel()
	c, s := w.c, &w.sink
	items := w.ctl.close()
	if w.broken || !c.reason.tellsClient() {
		_ = w.ws.CloseNow()
		return
	}
	s.limit = time.Now().Add(min(w.cfg.WriteTimeout, finalWriteTimeout))
	var err error
	for i := 0; i < len(items) && err == nil; i++ {
		if items[i].kind == itemFrame {
			err = s.frame(nil, items[i].frame)
		}
	}
	if err == nil {
		err = s.final(c.reason, c.delay)
	}
	if err == nil {
		err = s.flush()
	}
	if err != nil {
		_ = w.ws.CloseNow()
		return
	}
	if c.reason.Code == ReasonMessageTooBig.Code && w.raw != nil && w.raw.tooBig.Load() {
		// Refused at its frame header (wsFrameWatch): the close frame is
		// out now, and the payload the client may still be sending is
		// read and discarded for a short while only.
		w.raw.drain(time.Now().Add(finalWriteTimeout))
	}
	if c.reason.Code == ReasonTimeout.Code && w.raw != nil {
		// The client sent nothing for a timeout: it is most likely gone,
		// and coder/websocket would wait 5 s for its close frame (first
		// for the reader, blocked reading it, then for the frame) with
		// the connection and its goroutines held. An expired read
		// deadline ends the reader's read and the handshake's wait at
		// once; the close frame is still written before the connection
		// is dropped.
		_ = w.raw.SetReadDeadline(time.Now())
	}
	_ = w.ws.Close(closeCode(c.reason), c.reason.Code)
}

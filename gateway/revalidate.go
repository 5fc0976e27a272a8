package gateway

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/subscriptions"
)

const (
	// recheckConcurrency bounds the re-authorizations running at once, so
	// a slow webhook holds at most this many goroutines and never the
	// ticker; due rechecks beyond it wait for a later tick.
	recheckConcurrency = 32
	// recheckTimeout bounds one re-authorization (the webhook has its own,
	// shorter timeout).
	recheckTimeout = 10 * time.Second
	// maxSnapshotTimeout bounds taking the revocation snapshot; it is also
	// never longer than half the interval, so a slow store delays the
	// other checks of a tick by at most that.
	maxSnapshotTimeout = 5 * time.Second
)

// revalidator is the server-wide revalidation timer (Config.RevalidateInterval):
// one goroutine and one ticker walk every connection, whatever their
// number. Each tick it takes one revocation snapshot and closes the
// connections it revokes and the subscriptions whose subscription token it
// revokes, and hands due re-authorizations to at most recheckConcurrency
// goroutines. A token's expiry is not the tick's: each transport runs a
// timer of the connection's own, to the millisecond (internal/ws,
// internal/sse), as does each subscription token (internal/session).
type revalidator struct {
	srv      *Server
	interval time.Duration

	set  atomic.Pointer[auth.RevocationSet] // the last good snapshot
	jobs chan struct{}                      // re-authorization slots
	buf  []*session.Conn                    // the ticker's connection list

	mu      sync.Mutex
	started bool
	stopped bool
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{} // closed when the ticker goroutine ends
	wg      sync.WaitGroup
}

func newRevalidator(s *Server) *revalidator {
	return &revalidator{
		srv:      s,
		interval: s.cfg.RevalidateInterval,
		jobs:     make(chan struct{}, recheckConcurrency),
	}
}

// start runs the timer unless it runs already or was stopped. The server
// starts it in Start and, for a handler served without Start, with its
// first connection.
func (rv *revalidator) start() {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	if rv.started || rv.stopped {
		return
	}
	rv.started = true
	rv.ctx, rv.cancel = context.WithCancel(context.Background())
	rv.done = make(chan struct{})
	go rv.loop()
}

// stop ends the timer and waits for it and for the re-authorizations it
// started. Safe to call twice, and before start.
func (rv *revalidator) stop() {
	rv.mu.Lock()
	rv.stopped = true
	started := rv.started
	rv.mu.Unlock()
	if !started {
		return
	}
	rv.cancel()
	<-rv.done
	rv.wg.Wait()
}

func (rv *revalidator) loop() {
	defer close(rv.done)
	rv.snapshot() // new connections are checked against it at once
	t := time.NewTicker(rv.interval)
	defer t.Stop()
	for {
		select {
		case <-rv.ctx.Done():
			return
		case <-t.C:
			rv.tick()
		}
	}
}

// revoked reports whether c is revoked per the last good snapshot.
func (rv *revalidator) revoked(c *auth.Claims) bool {
	return rv.set.Load().Revoked(c)
}

// snapshot takes one revocation snapshot. On failure the last good one
// stays in force: revocation fails open during a store outage, rather
// than disconnecting every client of every node at once.
func (rv *revalidator) snapshot() {
	src := rv.srv.deps.Revocations
	if src == nil {
		return
	}
	ctx, cancel := context.WithTimeout(rv.ctx, min(rv.interval/2, maxSnapshotTimeout))
	defer cancel()
	set, err := src.Snapshot(ctx)
	if err != nil {
		if rv.ctx.Err() != nil {
			return
		}
		rv.srv.metrics.revalFailures.WithLabelValues(checkRevocations).Inc()
		rv.srv.connLog.Log(slog.LevelWarn, "gateway: revocation snapshot failed; keeping the last good one",
			slog.String("error", err.Error()))
		return
	}
	rv.set.Store(set)
	rv.srv.metrics.revocationsAt.Set(float64(time.Now().UnixNano()) / 1e9)
}

// tick runs one revalidation pass over every connection.
func (rv *revalidator) tick() {
	rv.snapshot()
	set := rv.set.Load()
	now := time.Now()
	conns := rv.srv.connList(rv.buf[:0])
	for _, c := range conns {
		rv.check(c, set, now)
	}
	clear(conns)
	rv.buf = conns[:0]
}

// check revalidates one connection.
func (rv *revalidator) check(c *session.Conn, set *auth.RevocationSet, now time.Time) {
	if c.Closed() {
		return
	}
	claims := c.CurrentClaims()
	if claims == nil {
		return // a WebSocket before connect
	}
	if set.Revoked(claims) {
		c.Close(session.ReasonRevoked, 0)
		return
	}
	c.CheckCredentials(set, now)
	rv.dueRechecks(c, claims, now)
}

// dueRechecks starts the re-authorizations of c that are due, as long as
// slots are free; the rest stay due for the next tick.
func (rv *revalidator) dueRechecks(c *session.Conn, claims *auth.Claims, now time.Time) {
	c.DueRechecks(now, func(ch, subToken string, rc *session.Recheck) bool {
		select {
		case rv.jobs <- struct{}{}:
		default:
			return false
		}
		rv.wg.Add(1)
		go rv.recheck(c, ch, rc, subToken, claims)
		return true
	})
}

// recheck re-authorizes one subscription off the ticker's goroutine.
func (rv *revalidator) recheck(c *session.Conn, ch string, rc *session.Recheck, subToken string, claims *auth.Claims) {
	defer rv.wg.Done()
	defer func() { <-rv.jobs }()
	ctx, cancel := context.WithTimeout(rv.ctx, recheckTimeout)
	defer cancel()
	d, err := rv.srv.deps.Authorizer.Authorize(ctx, subscriptions.Request{
		Claims: claims, Channel: ch, SubToken: subToken, Live: true,
	})
	if rv.ctx.Err() != nil {
		return
	}
	c.Reauthorized(ch, subToken, rc, d, err)
}

package pgstore

import (
	"context"
	"time"

	"github.com/heraldgw/herald/outboxfeed/internal/backoff"

	"github.com/heraldgw/herald/internal/ratelog"
	"github.com/heraldgw/herald/internal/wait"
	"github.com/heraldgw/herald/outboxfeed/internal/storekit"

	"github.com/jackc/pgx/v5"
)

// Listener reconnect backoff bounds.
const (
	listenBackoffMin = 100 * time.Millisecond
	listenBackoffMax = 10 * time.Second
)

// Wakeups LISTENs on a dedicated connection (not from the pool) and signals
// on every notification, and once after each successful (re)LISTEN so the
// caller drains what was staged while it was not listening. A lost
// connection is re-established with bounded backoff. With the notify
// trigger disabled there is no listener: the channel is signalled once and
// then only by Notify of this store.
func (s *Store) Wakeups(ctx context.Context) <-chan struct{} {
	if s.cfg.DisableNotifyTrigger {
		return s.wakeup.Subscribe(ctx)
	}
	ch := make(chan struct{}, 1)
	go s.listen(ctx, ch)
	return ch
}

func (s *Store) listen(ctx context.Context, ch chan struct{}) {
	defer close(ch)
	limiter := ratelog.NewLimiter(time.Minute, 1)
	failures := 0
	for ctx.Err() == nil {
		err := s.listenOnce(ctx, ch, &failures)
		if ctx.Err() != nil {
			return
		}
		failures++
		if ok, suppressed := limiter.Allow("listen"); ok {
			s.log.Warn("outbox listener lost its connection; reconnecting", "err", err, "suppressed", suppressed)
		}
		if !wait.Sleep(ctx, backoff.Outage(failures, listenBackoffMin, listenBackoffMax)) {
			return
		}
	}
}

// listenOnce connects, LISTENs, signals a backlog drain, then waits for
// notifications until the connection fails or ctx ends.
func (s *Store) listenOnce(ctx context.Context, ch chan struct{}, failures *int) error {
	cc := s.pool.Config().ConnConfig.Copy()
	cc.RuntimeParams["application_name"] = "herald-listener"
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgNotifyChannel); err != nil {
		return err
	}
	*failures = 0
	storekit.Signal(ch)
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		storekit.Signal(ch)
	}
}

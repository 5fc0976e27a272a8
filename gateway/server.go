package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/internal/lifecycle"
	"github.com/heraldgw/herald/internal/ratelog"
)

// Server is the gateway: an http.Handler, and a service that runs it on
// Config.Listen.
type Server struct {
	cfg      Config
	deps     Deps
	log      *slog.Logger
	connLog  *ratelog.Logger
	metrics  *metrics
	gatherer prometheus.Gatherer
	handler  http.Handler

	slots      atomic.Int64 // connections holding a slot (MaxConnections)
	nextConnID atomic.Uint64
	attempts   *ipLimiter     // ConnectAttemptsPerIP; nil when disabled
	trusted    trustedProxies // Config.TrustedProxies, normalized
	users      *userLimiter   // MaxConnectionsPerUser; nil when unlimited
	reval      *revalidator
	env        *session.Env // what every connection shares: bounds, hub, history, counters, writers
	wsEnv      *ws.Env      // what every WebSocket connection shares

	mu        sync.Mutex
	conns     map[*session.Conn]struct{}
	draining  bool
	drained   chan struct{} // closed once draining and conns is empty
	httpSrv   *http.Server
	ln        net.Listener
	serveDone chan struct{}
	stopped   bool
	stopOnce  sync.Once
	svc       lifecycle.Service
}

// New returns a gateway for cfg and deps; zero Config fields take their
// defaults. It registers the gateway's metrics with deps.Registerer.
func New(cfg Config, deps Deps) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := deps.validate(); err != nil {
		return nil, err
	}
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(deps.Registerer)
	if err != nil {
		return nil, err
	}
	m.connectionsMax.Set(float64(cfg.MaxConnections))
	g := deps.Gatherer
	if g == nil {
		g, _ = deps.Registerer.(prometheus.Gatherer)
	}
	s := &Server{
		cfg:      cfg,
		deps:     deps,
		log:      log,
		connLog:  ratelog.New(log, 10*time.Second, 20),
		metrics:  m,
		gatherer: g,
		conns:    map[*session.Conn]struct{}{},
	}
	if cfg.ConnectAttemptsPerIP > 0 {
		s.attempts = newIPLimiter(cfg.ConnectAttemptsPerIP, cfg.ConnectAttemptsBurst, maxIPBuckets)
	}
	s.users = newUserLimiter(cfg.MaxConnectionsPerUser)
	s.reval = newRevalidator(s)
	s.env = &session.Env{
		Bounds:  cfg.bounds(),
		Hub:     deps.Hub,
		History: deps.Broker,
		Counters: session.Counters{
			Deliveries:     m.deliveries,
			QueueDropped:   m.queueDropped,
			CatchUps:       m.catchUps,
			QueueLimit:     m.limitRejections.WithLabelValues(session.LimitQueue),
			SubsEnded:      m.subsEnded,
			ReauthFailures: m.revalFailures.WithLabelValues(checkReauthorize),
		},
		Log:     s.connLog,
		Writers: session.NewWriterPool(),
	}
	s.wsEnv = newWSEnv(s)
	s.trusted = newTrustedProxies(cfg.TrustedProxies)
	s.handler = s.withClient(s.routes())
	return s, nil
}

// Config returns the server's configuration with defaults filled in.
func (s *Server) Config() Config { return s.cfg }

// Handler returns the gateway's routes: GET /v1/sse, /v1/ws, POST
// /v1/tickets, GET /healthz, /readyz, /metrics, / (demo page), the JS
// client under /client/ and, with Config.AdminToken, the operator view
// under /ops/. A handler served without Start runs the revalidation
// timer from its first connection until Stop.
func (s *Server) Handler() http.Handler { return s.handler }

// Start listens on Config.Listen and serves in the background until Stop,
// or until ctx is done (which stops the server gracefully). It also starts
// the revalidation timer (Config.RevalidateInterval).
func (s *Server) Start(ctx context.Context) error {
	err := s.svc.Start(ctx, s.listen, s.serve, s.watch)
	if errors.Is(err, lifecycle.ErrStarted) || errors.Is(err, lifecycle.ErrStopped) {
		return fmt.Errorf("gateway: start: %w", err)
	}
	return err
}

// listen opens the listener and readies the HTTP server (Start's init).
func (s *Server) listen(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped { // Stop ran its graceful part before Start
		return fmt.Errorf("gateway: start: %w", ErrStopped)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("gateway: listen on %s: %w", s.cfg.Listen, err)
	}
	s.ln = ln
	s.httpSrv = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.cfg.HeaderTimeout,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	s.serveDone = make(chan struct{})
	s.reval.start()
	s.log.Info("gateway: listening", slog.String("addr", ln.Addr().String()))
	return nil
}

// serve serves until the server is shut down.
func (s *Server) serve(context.Context) {
	s.mu.Lock()
	srv, ln, done := s.httpSrv, s.ln, s.serveDone
	s.mu.Unlock()
	defer close(done)
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.log.Error("gateway: serve failed", slog.String("error", err.Error()))
	}
}

// watch stops the server gracefully once Start's context ends (or Stop
// cancels it).
func (s *Server) watch(ctx context.Context) {
	<-ctx.Done()
	s.stop()
}

// Addr is the address the server listens on, or "" before Start.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Stop shuts the server down gracefully: it stops accepting connections,
// sends every stream a disconnect event (reason "shutdown", reconnect after
// a random delay up to Config.ShutdownReconnectDelay), waits up to
// Config.ShutdownTimeout for streams and requests to finish, then closes
// what remains. It is safe to call twice, and before Start.
func (s *Server) Stop() {
	s.stop()
	s.svc.Stop(nil)
}

func (s *Server) stop() {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.stopped = true
		s.draining = true
		s.drained = make(chan struct{})
		if len(s.conns) == 0 {
			close(s.drained)
		}
		conns := make([]*session.Conn, 0, len(s.conns))
		for c := range s.conns {
			conns = append(conns, c)
		}
		srv, serveDone := s.httpSrv, s.serveDone
		s.mu.Unlock()
		// Every stream is told "shutdown" now; the timer has nothing left to
		// decide.
		s.reval.stop()

		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
		defer cancel()
		shutdownDone := make(chan error, 1)
		if srv != nil {
			// Shutdown closes the listener at once, then waits for the
			// streams below to end and their connections to go idle.
			go func() { shutdownDone <- srv.Shutdown(ctx) }()
		} else {
			shutdownDone <- nil
		}
		for _, c := range conns {
			c.Close(session.ReasonShutdown, s.reconnectJitter())
		}
		drained := false
		select {
		case <-s.drained:
			drained = true
		case <-ctx.Done():
		}
		// net/http's Shutdown waits only for the connections it still
		// has; a hijacked one (WebSocket, HTTP/1.1 SSE) can outlast it.
		err := <-shutdownDone
		if err == nil && !drained {
			err = ctx.Err()
		}
		if err != nil {
			s.log.Warn("gateway: graceful shutdown timed out; closing remaining connections",
				slog.String("error", err.Error()))
			if srv != nil {
				_ = srv.Close()
			}
			// srv.Close does not reach hijacked connections.
			s.mu.Lock()
			left := make([]*session.Conn, 0, len(s.conns))
			for c := range s.conns {
				left = append(left, c)
			}
			s.mu.Unlock()
			for _, c := range left {
				c.HardClose(session.ReasonShutdown)
			}
			// Closing the connections fails the streams' writes; give their
			// handlers a moment to return.
			select {
			case <-s.drained:
			case <-time.After(time.Second):
			}
		}
		if srv != nil {
			<-serveDone
		}
		s.env.Writers.Stop()
		s.log.Info("gateway: stopped", slog.Int("streams_closed", len(conns)))
	})
}

// reconnectJitter is a random delay in [0, ShutdownReconnectDelay].
func (s *Server) reconnectJitter() time.Duration {
	return time.Duration(rand.Int64N(int64(s.cfg.ShutdownReconnectDelay) + 1))
}

// acquireSlot takes one of MaxConnections slots.
func (s *Server) acquireSlot() bool {
	if s.slots.Add(1) > int64(s.cfg.MaxConnections) {
		s.slots.Add(-1)
		s.metrics.limit(limitConnections)
		return false
	}
	return true
}

func (s *Server) releaseSlot() { s.slots.Add(-1) }

// register adds c to the live connections, unless the server is stopping.
func (s *Server) register(c *session.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return false
	}
	s.conns[c] = struct{}{}
	s.reval.start()
	return true
}

// connList appends every live connection to buf and returns it.
func (s *Server) connList(buf []*session.Conn) []*session.Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		buf = append(buf, c)
	}
	return buf
}

func (s *Server) unregister(c *session.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	if s.draining && len(s.conns) == 0 {
		select {
		case <-s.drained:
		default:
			close(s.drained)
		}
	}
}

// release gives back what a connection held once it ended and its
// transport is done with it: its registration, the user's slot and the
// server's slot.
func (s *Server) release(c *session.Conn) {
	s.unregister(c)
	s.releaseUser(c)
	s.releaseSlot()
}

// opened counts and logs a connection whose stream starts.
func (s *Server) opened(c *session.Conn) {
	s.metrics.connections.WithLabelValues(c.Transport).Inc()
	s.metrics.connectionsTotal.WithLabelValues(c.Transport).Inc()
	s.connLog.Log(slog.LevelDebug, "gateway: connection opened", connAttrs(c)...)
}

// closed counts and logs a connection that ended.
func (s *Server) closed(c *session.Conn) {
	r := c.Reason()
	s.metrics.connections.WithLabelValues(c.Transport).Dec()
	s.metrics.disconnects.WithLabelValues(c.Transport, r.Code).Inc()
	level := slog.LevelDebug
	switch r.Code {
	case session.ReasonSlow.Code, session.ReasonWriteTimeout.Code, session.ReasonServerError.Code:
		level = slog.LevelWarn
	}
	attrs := append(connAttrs(c),
		slog.String("reason", r.Code),
		slog.Duration("duration", time.Since(c.Opened)))
	s.connLog.Log(level, "gateway: connection closed", attrs...)
}

// newConn returns a connection of transport whose writer is held off
// until the transport calls StartWriting.
func (s *Server) newConn(transport string, claims *auth.Claims, remote string) *session.Conn {
	return session.New(s.env, s.nextConnID.Add(1), transport, claims, remote)
}

// connAttrs are the log fields of c.
func connAttrs(c *session.Conn) []slog.Attr {
	return []slog.Attr{
		slog.Uint64("conn", c.ID),
		slog.String("transport", c.Transport),
		slog.String("tenant", c.Claims.Tenant),
		slog.String("sub", c.Claims.Subject),
		slog.String("remote", c.Remote),
	}
}

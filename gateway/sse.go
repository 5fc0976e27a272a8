package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/sse"
)

// handleSSE serves GET /v1/sse?channel=C&channel=D.
func (s *Server) handleSSE(w http.ResponseWriter, r *http.Request) {
	if !s.acquireSlot() {
		w.Header().Set("Retry-After", "1")
		s.refuseConn(w, r, transportSSE, session.ReasonTooManyConnections, "")
		return
	}
	req, reason, msg := s.parseSSE(r)
	if (reason.Code == session.ReasonTokenExpired.Code || reason == reasonTicketInvalid) && acceptsEventStream(r) {
		s.releaseSlot()
		s.metrics.refused(transportSSE, reason)
		s.expiredStream(w, r, msg)
		return
	}
	if reason.Code != "" {
		s.releaseSlot()
		s.refuseConn(w, r, transportSSE, reason, msg)
		return
	}
	conn := s.newConn(transportSSE, req.claims, clientOf(r).remote)
	if !s.acquireUser(conn, req.claims) {
		s.releaseSlot()
		w.Header().Set("Retry-After", "1")
		s.refuseConn(w, r, transportSSE, s.userLimitReason(), "")
		return
	}
	sc := sse.NewStream(conn, w)
	if !s.register(conn) {
		s.releaseUser(conn)
		s.releaseSlot()
		s.refuseConn(w, r, transportSSE, session.ReasonShutdown, "")
		return
	}
	s.serveSSE(sc, w, r, req)
}

// serveSSE subscribes the stream and writes its head, then hands an
// HTTP/1.1 stream to a goroutine of its own, or waits while the writer
// writes the stream until it ends. Whoever sees the stream end releases
// it (endSSE).
func (s *Server) serveSSE(sc *sse.Stream, w http.ResponseWriter, r *http.Request, req sseRequest) {
	conn := sc.Conn
	subs, err := s.subscribeSSE(r, conn, req)
	if err != nil && r.Context().Err() != nil {
		conn.Close(session.ReasonClientClosed, 0)
		s.endSSE(sc, false)
		return
	}
	if err != nil {
		conn.Close(session.ReasonServerError, 0)
		s.refuseConn(w, r, transportSSE, session.ReasonServerError, "cannot subscribe: the broker did not answer")
		s.connLog.Log(slog.LevelError, "gateway: sse subscribe failed",
			slog.Uint64("conn", conn.ID), slog.String("error", err.Error()))
		s.endSSE(sc, false)
		return
	}
	for i, ch := range req.channels {
		conn.Track(ch, req.subTokens[ch], req.decisions[i])
	}
	s.opened(conn)

	streamHeaders(w.Header())
	w.WriteHeader(http.StatusOK)
	if err := s.startSSE(sc.Sink, conn, subs); err != nil {
		conn.Close(session.WriteErrorReason(r.Context(), err), 0)
		s.endSSE(sc, true)
		return
	}
	hijacked := sc.Hijack(w, r)
	conn.StartHeartbeat()
	conn.StartWriting()
	sc.ArmExpiry()
	if hijacked {
		go func() {
			sc.Wait(context.Background()) // a hijacked stream reads its connection, not a context
			s.endSSE(sc, true)
		}()
		return
	}
	sc.Wait(r.Context())
	s.endSSE(sc, true)
}

// endSSE releases what a stream held once it ended: it counts it closed
// when it opened, then the stream releases its subscriptions and timer
// (sse.Stream.End), and the server its registration and slots.
func (s *Server) endSSE(sc *sse.Stream, opened bool) {
	if opened {
		s.closed(sc.Conn)
	}
	sc.End()
	s.release(sc.Conn)
}

// streamHeaders sets the headers of an event stream.
func streamHeaders(h http.Header) {
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	h.Set("X-Content-Type-Options", "nosniff")
}

// acceptsEventStream reports whether the client asked for an event stream
// (EventSource always sends Accept: text/event-stream).
func acceptsEventStream(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		if strings.Contains(strings.ToLower(v), "text/event-stream") {
			return true
		}
	}
	return false
}

// expiredStream answers an EventSource whose token has expired, or whose
// ticket was used up (EventSource reconnects with the URL it has), with a
// stream holding only "reauth" and "disconnect" (token_expired): a 401
// would stop EventSource for good, while a fresh token or ticket fixes
// this.
func (s *Server) expiredStream(w http.ResponseWriter, r *http.Request, msg string) {
	streamHeaders(w.Header())
	w.WriteHeader(http.StatusOK)
	sink := sse.NewSink(sse.NewHTTPOut(w), s.cfg.WriteTimeout)
	if sink.SetDeadline(time.Now().Add(min(s.cfg.WriteTimeout, session.FinalWriteTimeout))) == nil &&
		sink.Retry(s.cfg.SSERetry) == nil &&
		sink.Final(session.WithMessage(session.ReasonTokenExpired, msg), 0) == nil {
		_ = sink.Flush()
	}
	_ = sink.SetDeadline(time.Time{})
	s.connLog.Log(slog.LevelDebug, "gateway: expired token answered with reauth",
		slog.String("url", redactURL(r.URL)), slog.String("remote", clientOf(r).remote))
}

// subscribeSSE subscribes conn to every channel, resuming those the cursor
// covers.
func (s *Server) subscribeSSE(r *http.Request, conn *session.Conn, req sseRequest) ([]session.Subscription, error) {
	subs := make([]session.Subscription, 0, len(req.channels))
	since := req.cursor.Resume(req.claims.Tenant, req.channels)
	for i, ch := range req.channels {
		sub, err := conn.Subscribe(r.Context(), ch, since[i])
		if err != nil {
			return nil, fmt.Errorf("gateway: subscribe %q: %w", ch, err)
		}
		subs = append(subs, sub)
	}
	return subs, nil
}

// startSSE writes the head of a stream as one batch: the retry field, a
// subscribed event per channel, then the recovered publications.
func (s *Server) startSSE(sink *sse.Sink, conn *session.Conn, subs []session.Subscription) error {
	if err := sink.Arm(); err != nil {
		return err
	}
	if err := sink.Retry(s.cfg.SSERetry); err != nil {
		return err
	}
	for _, sub := range subs {
		if err := sink.Subscribed(0, sub, conn.Pos); err != nil {
			return err
		}
	}
	for _, sub := range subs {
		if _, err := conn.WriteRecovered(sink, sub.Pubs); err != nil {
			return err
		}
	}
	return sink.Flush()
}

// refuseConn answers a connection attempt of transport refused before its
// stream opened, and counts it (herald_connect_refusals_total).
func (s *Server) refuseConn(w http.ResponseWriter, r *http.Request, transport string, reason session.Reason, msg string) {
	s.metrics.refused(transport, reason)
	s.refused(w, r, reason, msg)
}

// refused answers a refused request and logs it (rate limited, token-free).
func (s *Server) refused(w http.ResponseWriter, r *http.Request, reason session.Reason, msg string) {
	refuse(w, reason, msg)
	s.connLog.Log(slog.LevelDebug, "gateway: request refused",
		slog.String("reason", reason.Code),
		slog.Int("status", reason.Status),
		slog.String("url", redactURL(r.URL)),
		slog.String("remote", clientOf(r).remote),
		slog.String("message", msg))
}

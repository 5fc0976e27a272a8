package webhook

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"
)

func TestDeliver2xx(t *testing.T) {
	for _, status := range []int{200, 201, 202, 204, 299} {
		rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
			if status != 204 {
				_, _ = w.Write([]byte(`{"ok":true}`))
			}
		})
		e := newEndpoint(t, testConfig(rc.URL))
		r := deliver(t, e, testMessage("m2xx"))
		wantClass(t, r, ClassDelivered, ReasonAccepted)
		if r.Status != status || r.Err != nil || r.Failing() {
			t.Fatalf("status %d: result %+v", status, r)
		}
	}
}

func TestDeliverOther4xxIsPermanent(t *testing.T) {
	for _, status := range []int{400, 401, 403, 404, 405, 409, 413, 422, 451} {
		rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "invoice in_42: amount must be positive", status)
		})
		e := newEndpoint(t, testConfig(rc.URL))
		r := deliver(t, e, testMessage("m4xx"))
		wantClass(t, r, ClassPermanent, ReasonClientError)
		var se *StatusError
		if !errors.As(r.Err, &se) || se.Status != status || se.Excerpt != "invoice in_42: amount must be positive" {
			t.Fatalf("status %d: err %#v", status, r.Err)
		}
		if !strings.Contains(r.Err.Error(), "invoice in_42") || !strings.Contains(r.Err.Error(), http.StatusText(status)) {
			t.Fatalf("err %q", r.Err)
		}
		if !r.Failing() {
			t.Fatal("a 4xx does not count as failing")
		}
	}
}

// The excerpt is bounded, valid UTF-8, with no NUL or other control byte.
func TestDeliverExcerptSanitized(t *testing.T) {
	body := "\x00bad\r\n\tinput \xff\xfe " + strings.Repeat("é", 400)
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(body))
	})
	e := newEndpoint(t, testConfig(rc.URL))
	r := deliver(t, e, testMessage("m-excerpt"))
	wantClass(t, r, ClassPermanent, ReasonClientError)
	var se *StatusError
	if !errors.As(r.Err, &se) {
		t.Fatalf("err %v", r.Err)
	}
	x := se.Excerpt
	if len(x) > ExcerptBytes || len(x) < ExcerptBytes-2 || !utf8.ValidString(x) || strings.ContainsAny(x, "\x00\r\n\t") {
		t.Fatalf("excerpt (%d bytes) %q", len(x), x)
	}
	if !strings.HasPrefix(x, "bad   input \ufffd\ufffd éé") {
		t.Fatalf("excerpt %q", x)
	}
}

func TestDeliver410IsGone(t *testing.T) {
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) { http.Error(w, "endpoint removed", http.StatusGone) })
	e := newEndpoint(t, testConfig(rc.URL))
	r := deliver(t, e, testMessage("m410"))
	wantClass(t, r, ClassGone, ReasonGone)
	if r.Status != 410 || !strings.Contains(r.Err.Error(), "no more deliveries") {
		t.Fatalf("result %+v", r)
	}
}

func TestDeliver429RetryAfter(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name, header string
		min, max     time.Duration
	}{
		{"seconds", "120", 120 * time.Second, 120 * time.Second},
		{"http date", now.Add(90 * time.Second).UTC().Format(http.TimeFormat), 80 * time.Second, 91 * time.Second},
		{"past date", now.Add(-time.Hour).UTC().Format(http.TimeFormat), 0, 0},
		{"beyond retry_after_max", "999999999", time.Hour, time.Hour},
		{"malformed", "soon", 0, 0},
		{"absent", "", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
				if tc.header != "" {
					w.Header().Set("Retry-After", tc.header)
				}
				http.Error(w, "slow down", http.StatusTooManyRequests)
			})
			e := newEndpoint(t, testConfig(rc.URL))
			r := deliver(t, e, testMessage("m429"))
			wantClass(t, r, ClassOutage, ReasonThrottled)
			if r.RetryAfter < tc.min || r.RetryAfter > tc.max {
				t.Fatalf("RetryAfter %v; want within [%v, %v]", r.RetryAfter, tc.min, tc.max)
			}
			// The schedule honours it: never sooner than asked (at least
			// outage_base_delay), never later than retry_after_max plus a
			// tenth.
			s := e.Schedule()
			for _, u := range []float64{0, 0.5, 0.999} {
				d := s.Outage(3, r.RetryAfter, u)
				if r.RetryAfter > 0 && (d < max(r.RetryAfter, s.OutageBaseDelay) || d > s.RetryAfterMax+s.RetryAfterMax/10) {
					t.Fatalf("Outage(3, %v, %v) = %v", r.RetryAfter, u, d)
				}
			}
		})
	}
}

func TestDeliver502503504AreOutages(t *testing.T) {
	for _, status := range []int{502, 503, 504} {
		rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(status)
		})
		e := newEndpoint(t, testConfig(rc.URL))
		r := deliver(t, e, testMessage("m5xx"))
		wantClass(t, r, ClassOutage, ReasonUnavailable)
		if r.Status != status || r.RetryAfter != 7*time.Second {
			t.Fatalf("status %d: result %+v", status, r)
		}
	}
}

func TestDeliverOther5xxIsRetryable(t *testing.T) {
	for _, status := range []int{500, 501, 505, 507, 599} {
		rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", status) })
		e := newEndpoint(t, testConfig(rc.URL))
		r := deliver(t, e, testMessage("m500"))
		wantClass(t, r, ClassRetryable, ReasonServerError)
		if r.Status != status || !strings.Contains(r.Err.Error(), "boom") {
			t.Fatalf("status %d: result %+v", status, r)
		}
	}
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(642) })
	e := newEndpoint(t, testConfig(rc.URL))
	wantClass(t, deliver(t, e, testMessage("m642")), ClassRetryable, ReasonUnexpectedStatus)
}

// A redirect is not followed: it is a permanent failure naming the
// Location, and the target never sees a request.
func TestDeliverRedirectIsPermanent(t *testing.T) {
	target := newReceiver(t, nil)
	for _, status := range []int{301, 302, 307, 308} {
		rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target.URL+"/moved", status)
		})
		e := newEndpoint(t, testConfig(rc.URL))
		r := deliver(t, e, testMessage("m3xx"))
		wantClass(t, r, ClassPermanent, ReasonRedirect)
		var se *StatusError
		if !errors.As(r.Err, &se) || se.Location != target.URL+"/moved" || !strings.Contains(r.Err.Error(), target.URL+"/moved") {
			t.Fatalf("status %d: err %v", status, r.Err)
		}
	}
	if n := len(target.got()); n != 0 {
		t.Fatalf("the redirect target got %d requests", n)
	}
}

// An endpoint that does not answer within the timeout is an outage; the
// request is abandoned at the timeout.
func TestDeliverTimeout(t *testing.T) {
	release := make(chan struct{})
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	cfg := testConfig(rc.URL)
	cfg.Timeout = 200 * time.Millisecond
	e := newEndpoint(t, cfg)
	start := time.Now()
	r := deliver(t, e, testMessage("m-timeout"))
	wantClass(t, r, ClassOutage, ReasonTimeout)
	if !errors.Is(r.Err, ErrTimeout) || r.Status != 0 || !r.Failing() {
		t.Fatalf("result %+v", r)
	}
	if el := time.Since(start); el < cfg.Timeout || el > cfg.Timeout+10*time.Second {
		t.Fatalf("Deliver took %v with timeout %v", el, cfg.Timeout)
	}
}

func TestDeliverConnectionRefused(t *testing.T) {
	e := newEndpoint(t, testConfig("http://"+freePort(t)+"/hook"))
	r := deliver(t, e, testMessage("m-refused"))
	wantClass(t, r, ClassOutage, ReasonRefused)
	if !strings.Contains(r.Err.Error(), "connection refused") || strings.Contains(r.Err.Error(), "/hook") {
		t.Fatalf("err %v", r.Err)
	}
}

func TestDeliverDNSFailure(t *testing.T) {
	e := newEndpoint(t, testConfig("http://no-such-host.invalid/hook"))
	r := deliver(t, e, testMessage("m-dns"))
	wantClass(t, r, ClassOutage, ReasonDNS)
}

// A connection closed before any answer is an outage.
func TestDeliverConnectionReset(t *testing.T) {
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	})
	e := newEndpoint(t, testConfig(rc.URL))
	r := deliver(t, e, testMessage("m-reset"))
	wantClass(t, r, ClassOutage, ReasonReset)
}

// A server that sends its status at once and then dribbles the body is
// bounded by the timeout: a 2xx is delivered (the status is the answer), a
// 4xx keeps what arrived as its excerpt.
func TestDeliverSlowBody(t *testing.T) {
	for _, status := range []int{200, 400} {
		rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
			rcon := http.NewResponseController(w)
			_, _ = w.Write([]byte("partial "))
			_ = rcon.Flush()
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-r.Context().Done():
					return
				case <-tick.C:
					if _, err := w.Write([]byte(".")); err != nil {
						return
					}
					_ = rcon.Flush()
				}
			}
		})
		cfg := testConfig(rc.URL)
		cfg.Timeout = 300 * time.Millisecond
		e := newEndpoint(t, cfg)
		start := time.Now()
		r := deliver(t, e, testMessage("m-slow"))
		el := time.Since(start)
		if el > cfg.Timeout+10*time.Second {
			t.Fatalf("Deliver took %v with timeout %v", el, cfg.Timeout)
		}
		if status == 200 {
			wantClass(t, r, ClassDelivered, ReasonAccepted)
			continue
		}
		wantClass(t, r, ClassPermanent, ReasonClientError)
		var se *StatusError
		if !errors.As(r.Err, &se) || !strings.HasPrefix(se.Excerpt, "partial") {
			t.Fatalf("err %v", r.Err)
		}
	}
}

// The caller's context ending is not the endpoint's fault.
func TestDeliverCanceled(t *testing.T) {
	arrived := make(chan struct{})
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done()
	})
	e := newEndpoint(t, testConfig(rc.URL))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Result)
	go func() { done <- e.Deliver(ctx, testMessage("m-cancel")) }()
	<-arrived
	cancel()
	r := <-done
	wantClass(t, r, ClassCanceled, ReasonCanceled)
	if r.Failing() {
		t.Fatal("a canceled delivery counts as failing")
	}
}

// A Message that cannot be encoded is refused before anything is sent.
func TestDeliverInvalidMessage(t *testing.T) {
	rc := newReceiver(t, nil)
	e := newEndpoint(t, testConfig(rc.URL))
	for name, m := range map[string]Message{
		"no id":         {Type: "t", SchemaVersion: 1, Time: testTime, Data: []byte(`1`)},
		"dot in id":     {ID: "a.b", Type: "t", SchemaVersion: 1, Time: testTime, Data: []byte(`1`)},
		"space in id":   {ID: "a b", Type: "t", SchemaVersion: 1, Time: testTime, Data: []byte(`1`)},
		"no type":       {ID: "a", SchemaVersion: 1, Time: testTime, Data: []byte(`1`)},
		"version 0":     {ID: "a", Type: "t", Time: testTime, Data: []byte(`1`)},
		"zero time":     {ID: "a", Type: "t", SchemaVersion: 1, Data: []byte(`1`)},
		"no data":       {ID: "a", Type: "t", SchemaVersion: 1, Time: testTime},
		"bad data":      {ID: "a", Type: "t", SchemaVersion: 1, Time: testTime, Data: []byte(`{`)},
		"bad freshness": {ID: "a", Type: "t", SchemaVersion: 1, Time: testTime, Data: []byte(`1`), Freshness: []byte(`nope`)},
	} {
		r := deliver(t, e, m)
		if r.Class != ClassPermanent || r.Reason != ReasonInvalidMessage || !errors.Is(r.Err, ErrInvalidMessage) || r.Failing() {
			t.Fatalf("%s: result %+v", name, r)
		}
	}
	if n := len(rc.got()); n != 0 {
		t.Fatalf("%d requests sent", n)
	}
}

// Connections are kept alive and reused, whatever the answer; concurrent
// deliveries use at most max_in_flight connections.
func TestKeepAliveReuse(t *testing.T) {
	statuses := []int{204, 200, 400, 500, 503, 429, 410}
	var mu sync.Mutex
	i := 0
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		st := statuses[i%len(statuses)]
		i++
		mu.Unlock()
		if st == 204 {
			w.WriteHeader(st)
			return
		}
		http.Error(w, strings.Repeat("x", 4000), st)
	})
	cfg := testConfig(rc.URL)
	cfg.MaxInFlight = 4
	e := newEndpoint(t, cfg)
	for range 50 {
		deliver(t, e, testMessage("m-seq"))
	}
	if n := rc.conns.Load(); n != 1 {
		t.Fatalf("50 sequential deliveries opened %d connections; want 1", n)
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 20 {
				deliver(t, e, testMessage("m-par"))
			}
		})
	}
	wg.Wait()
	if n := rc.conns.Load(); n > int64(cfg.MaxInFlight) {
		t.Fatalf("16 concurrent senders opened %d connections; max_in_flight is %d", n, cfg.MaxInFlight)
	}
	if n := len(rc.got()); n != 50+16*20 {
		t.Fatalf("receiver got %d requests", n)
	}
}

// Deliver holds at most max_in_flight requests under way.
func TestMaxInFlight(t *testing.T) {
	const limit = 3
	var mu sync.Mutex
	inFlight, peak := 0, 0
	release := make(chan struct{})
	entered := make(chan struct{}, 100)
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inFlight++
		peak = max(peak, inFlight)
		mu.Unlock()
		entered <- struct{}{}
		<-release
		mu.Lock()
		inFlight--
		mu.Unlock()
		w.WriteHeader(204)
	})
	cfg := testConfig(rc.URL)
	cfg.MaxInFlight = limit
	e := newEndpoint(t, cfg)
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { wantClass(t, deliver(t, e, testMessage("m-inflight")), ClassDelivered, ReasonAccepted) })
	}
	for range limit {
		<-entered
	}
	// All slots are taken: a delivery whose context ends while it waits
	// for one gives up without sending.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := e.Deliver(ctx, testMessage("m-waiting"))
	wantClass(t, r, ClassCanceled, ReasonCanceled)
	if !strings.Contains(r.Err.Error(), "waiting for a slot") {
		t.Fatalf("err %v", r.Err)
	}
	close(release)
	wg.Wait()
	if peak > limit {
		t.Fatalf("%d requests under way at once; max_in_flight %d", peak, limit)
	}
}

// A kept-alive connection the receiver closes when the next request comes
// in is not an outage: the request is sent again on a new connection (a
// webhook is idempotent by its webhook-id), with the same id.
func TestStaleKeepAliveResent(t *testing.T) {
	type connKey struct{}
	var requests atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		_, _ = io.Copy(io.Discard, r.Body) // the whole request is sent
		n := r.Context().Value(connKey{}).(*atomic.Int64)
		if n.Add(1) == 2 { // the second request on this connection
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, new(atomic.Int64))
	}
	srv.Start()
	defer srv.Close()
	e := newEndpoint(t, testConfig(srv.URL))
	wantClass(t, deliver(t, e, testMessage("m-first")), ClassDelivered, ReasonAccepted)
	wantClass(t, deliver(t, e, testMessage("m-second")), ClassDelivered, ReasonAccepted)
	if n := requests.Load(); n != 3 {
		t.Fatalf("the receiver got %d requests; want 3 (the second sent twice)", n)
	}
}

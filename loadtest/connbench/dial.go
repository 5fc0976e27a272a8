package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// newHTTPClient returns a client connections dial with: no compression
// (the server's frames are what is measured), a dial timeout, and no pool
// limit per host (each stream holds its own TCP connection). rcvbuf > 0
// fixes the socket's receive buffer (which also stops the kernel from
// growing it): a stalled subscriber then fills the server's send queue
// after a few publications instead of after megabytes.
func newHTTPClient(rcvbuf int) (*http.Client, *http.Transport) {
	d := &net.Dialer{Timeout: 10 * time.Second}
	if rcvbuf > 0 {
		d.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf)
			}); err != nil {
				return err
			}
			return serr
		}
	}
	tr := &http.Transport{
		DialContext:           countedDial(d.DialContext),
		DisableCompression:    true,
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       5 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
	}
	return &http.Client{Transport: tr}, tr
}

// errRetry marks a refusal the server asked us to retry later (429 or 503
// with Retry-After): the per-address attempt rate, the node's connection
// bound while earlier connections close.
type errRetry struct {
	status int
	after  time.Duration
	body   string
}

func (e *errRetry) Error() string {
	return fmt.Sprintf("connbench: refused with %d, retry after %v: %s", e.status, e.after, e.body)
}

// refusal turns a non-success handshake response into an error, an
// *errRetry when the server says to come back.
func refusal(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	body := strings.TrimSpace(string(b))
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		after := time.Second
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			after = time.Duration(s) * time.Second
		}
		return &errRetry{status: resp.StatusCode, after: after, body: body}
	}
	return fmt.Errorf("connbench: refused with %s: %s", resp.Status, body)
}

// withRetry runs open until it succeeds, fails for good, or ctx ends;
// refusals the server marked temporary are retried after the delay it
// named.
func withRetry(ctx context.Context, retries *int64, mu *sync.Mutex, open func() error) error {
	for {
		err := open()
		var re *errRetry
		if !errors.As(err, &re) {
			return err
		}
		mu.Lock()
		*retries++
		mu.Unlock()
		t := time.NewTimer(re.after)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("connbench: gave up retrying: %w (last: %v)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// forEach runs fn(i) for i in [0, n) on `workers` goroutines and returns
// the first error; after one, the rest are not started.
func forEach(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		fed   int
	)
	for range min(workers, n) {
		wg.Go(func() {
			for i := range next {
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		})
	}
feed:
	for fed < n {
		select {
		case next <- fed:
			fed++
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first == nil && fed < n {
		// The parent ended (timeout or interrupt) before every item ran.
		return fmt.Errorf("connbench: %w", context.Cause(ctx))
	}
	return first
}

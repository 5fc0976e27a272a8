package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// wire counts the bytes the generator's client connections read and
// write: HTTP headers and bodies, WebSocket frames, as the sockets carry
// them (TCP/IP headers not counted). The poll scenario reads it around
// each phase.
var wire wireCounter

type wireCounter struct{ read, written atomic.Int64 }

// total is every byte read and written so far.
func (w *wireCounter) total() int64 { return w.read.Load() + w.written.Load() }

// countedConn is a client connection counted in wire.
type countedConn struct{ net.Conn }

func (c countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	wire.read.Add(int64(n))
	return n, err
}

func (c countedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	wire.written.Add(int64(n))
	return n, err
}

// countedDial wraps dial so that its connections are counted in wire.
func countedDial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countedConn{c}, nil
	}
}

// poller is one polling client: it asks for its channel's updates after
// the last one it has, every interval, as a page that refreshes on a
// timer does, over one kept-alive connection.
type poller struct {
	channel int
	after   int64 // the id of the last update received
	lastK   int64 // the sequence number of the last update received; -1 none

	got, dups, ooo int64
	polls, empty   int64
	errors         int64
	lastErr        error
	caughtUpAt     atomic.Int64 // sequence number of the last update received, for the drain
}

// pollResponse is the poll server's answer.
type pollResponse struct {
	Updates []struct {
		ID   int64 `json:"id"`
		Data struct {
			K int64 `json:"k"`
		} `json:"data"`
	} `json:"updates"`
}

// run polls every interval, starting at a random point of the first
// interval, until ctx ends; each update received is timed against its
// COMMIT (stale).
func (p *poller) run(ctx context.Context, hc *http.Client, base string, interval time.Duration, channels int, commits *commitLog, stale *histogram, early *atomic.Int64) {
	p.lastK = -1
	p.caughtUpAt.Store(-1)
	t := time.NewTimer(rand.N(interval))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		t.Reset(interval)
		for more := true; more && ctx.Err() == nil; {
			more = p.poll(ctx, hc, base, channels, commits, stale, early)
		}
	}
}

// poll makes one request and takes in its updates; true when the page
// was full and the rest should be asked for at once.
func (p *poller) poll(ctx context.Context, hc *http.Client, base string, channels int, commits *commitLog, stale *histogram, early *atomic.Int64) bool {
	p.polls++
	url := fmt.Sprintf("%s/v1/updates?channel=%d&after=%d", base, p.channel, p.after)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		p.fail(err)
		return false
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			p.fail(err)
		}
		return false
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	recv := time.Now()
	if err != nil || resp.StatusCode != http.StatusOK {
		if ctx.Err() == nil {
			p.fail(fmt.Errorf("status %d: %s (%v)", resp.StatusCode, body, err))
		}
		return false
	}
	var pr pollResponse
	if err := json.Unmarshal(body, &pr); err != nil {
		p.fail(err)
		return false
	}
	if len(pr.Updates) == 0 {
		p.empty++
	}
	for _, u := range pr.Updates {
		p.after = max(p.after, u.ID)
		k := u.Data.K
		switch {
		case k <= p.lastK:
			p.dups++
			continue
		case p.lastK >= 0 && k != p.lastK+int64(channels), p.lastK < 0 && k != int64(p.channel):
			p.ooo++
		}
		p.lastK = k
		p.got++
		if at := commits.at(uint64(k)); at == 0 || at > recv.UnixNano() {
			early.Add(1)
			stale.record(0)
		} else {
			stale.record(time.Duration(recv.UnixNano() - at))
		}
	}
	p.caughtUpAt.Store(p.lastK)
	return len(pr.Updates) == pollPage
}

func (p *poller) fail(err error) {
	p.errors++
	p.lastErr = err
}

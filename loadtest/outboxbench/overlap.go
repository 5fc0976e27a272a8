package main

import (
	"context"
	"fmt"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
	"github.com/heraldgw/herald/outboxfeed"
)

// hookBusy counts what the webhook handler's Worker has under way in the
// latency phase: its store calls and its deliveries, each as calls in
// flight and calls started, so that each of realtime's store calls can
// be told apart by whether one of the webhook handler's ran beside it.
type hookBusy struct {
	stmts, stmtStarts       atomic.Int64
	delivers, deliverStarts atomic.Int64
}

// hookActivity is the webhook handler's, shared by the latency phase's
// stores and deliverer (one run at a time).
var hookActivity hookBusy

// overlapMark is what the webhook handler had under way when one of
// realtime's calls began.
type overlapMark struct{ stmts, stmtStarts, delivers, deliverStarts int64 }

func (h *hookBusy) mark() overlapMark {
	return overlapMark{h.stmts.Load(), h.stmtStarts.Load(), h.delivers.Load(), h.deliverStarts.Load()}
}

// since reports whether a webhook handler's store call, and a delivery,
// ran at some point between m and now.
func (h *hookBusy) since(m overlapMark) (stmt, deliver bool) {
	return m.stmts > 0 || h.stmtStarts.Load() != m.stmtStarts, m.delivers > 0 || h.deliverStarts.Load() != m.deliverStarts
}

// busyDeliverer counts next's deliveries in hookActivity.
type busyDeliverer struct{ next outboxfeed.Deliverer }

func (d busyDeliverer) Deliver(ctx context.Context, r *outboxfeed.Record) error {
	hookActivity.deliverStarts.Add(1)
	hookActivity.delivers.Add(1)
	defer hookActivity.delivers.Add(-1)
	return d.next.Deliver(ctx, r)
}

// call is one of realtime's store calls: its duration, and whether the
// webhook handler's store calls or deliveries overlapped it.
type call struct {
	d                  time.Duration
	withStmt, withSend bool
	// startStmt, startSend: under way when the call began (a call's own
	// length does not make these likelier).
	startStmt, startSend bool
}

// overlapSplit describes realtime's store calls by what of the webhook
// handler's overlapped them.
func overlapSplit(calls []call, atStart bool) string {
	var both, stmtOnly, sendOnly, none []time.Duration
	for _, c := range calls {
		if atStart {
			c.withStmt, c.withSend = c.startStmt, c.startSend
		}
		switch {
		case c.withStmt && c.withSend:
			both = append(both, c.d)
		case c.withStmt:
			stmtOnly = append(stmtOnly, c.d)
		case c.withSend:
			sendOnly = append(sendOnly, c.d)
		default:
			none = append(none, c.d)
		}
	}
	q := func(name string, d []time.Duration) string {
		s := benchkit.Summarize(d)
		return fmt.Sprintf("%s %d p50 %s p99 %s", name, s.N, benchkit.MS(s.P50), benchkit.MS(s.P99))
	}
	return strings.Join([]string{q("beside neither", none), q("a webhook statement", stmtOnly), q("webhook deliveries", sendOnly), q("both", both)}, "; ")
}

// cpuPressure is the kernel's total time some runnable task waited for a
// CPU (/proc/pressure/cpu, "some"), 0 where it is not available.
func cpuPressure() time.Duration {
	b, err := os.ReadFile("/proc/pressure/cpu")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	_, total, ok := strings.Cut(line, "total=")
	if !ok {
		return 0
	}
	us, err := strconv.ParseInt(strings.TrimSpace(total), 10, 64)
	if err != nil {
		return 0
	}
	return time.Duration(us) * time.Microsecond
}

// gcCycles is how many garbage collections the process completed.
func gcCycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// nullDeliverer delivers nothing and succeeds (-webhook-null).
type nullDeliverer struct{}

func (nullDeliverer) Deliver(context.Context, *outboxfeed.Record) error { return nil }

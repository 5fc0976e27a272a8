package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/heraldgw/herald/internal/wait"
	"github.com/heraldgw/herald/loadtest/internal/benchkit"
)

// waitSampler samples, every interval, what the bench database's active
// backends are doing (pg_stat_activity: application, wait event, the
// statement's start), for -sample-waits.
type waitSampler struct {
	counts  map[string]int
	samples int
	armed   int // samples that found the wake-up trigger armed
	cancel  context.CancelFunc
	done    sync.WaitGroup
}

// startWaitSampler samples on a connection of its own to url until stop.
func startWaitSampler(ctx context.Context, url string, interval time.Duration) *waitSampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &waitSampler{counts: map[string]int{}, cancel: cancel}
	s.done.Go(func() {
		pool, err := benchkit.OpenPool(ctx, url, 1, "outboxbench-sampler")
		if err != nil {
			return
		}
		defer pool.Close()
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return
		}
		defer conn.Release()
		for wait.Sleep(ctx, interval) {
			rows, err := conn.Query(ctx, `SELECT application_name, coalesce(wait_event_type || ':' || wait_event, 'CPU'), left(regexp_replace(query, '\s+', ' ', 'g'), 60)
				FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid()`)
			if err != nil {
				continue
			}
			s.samples++
			for rows.Next() {
				var app, ev, q string
				if rows.Scan(&app, &ev, &q) == nil {
					s.counts[app+" | "+ev+" | "+q]++
				}
			}
			rows.Close()
			var armed bool
			if conn.QueryRow(ctx, `SELECT coalesce(bool_or(armed_until > statement_timestamp()), false) FROM herald.outbox_wakeup`).Scan(&armed) == nil && armed {
				s.armed++
			}
		}
	})
	return s
}

// stop ends the sampling and describes the most frequent activities,
// each as the share of samples it was seen in.
func (s *waitSampler) stop() string {
	if s == nil {
		return ""
	}
	s.cancel()
	s.done.Wait()
	type kv struct {
		k string
		n int
	}
	var all []kv
	for k, n := range s.counts {
		all = append(all, kv{k, n})
	}
	slices.SortFunc(all, func(a, b kv) int { return cmp.Compare(b.n, a.n) })
	var b strings.Builder
	fmt.Fprintf(&b, "%d samples, the wake-up trigger armed in %.1f %%\n", s.samples, 100*float64(s.armed)/float64(max(1, s.samples)))
	for _, e := range all[:min(len(all), 14)] {
		fmt.Fprintf(&b, "  %5.1f %%  %s\n", 100*float64(e.n)/float64(max(1, s.samples)), e.k)
	}
	return b.String()
}

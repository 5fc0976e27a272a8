package crashtest

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// TestFeedSIGSTOPPastLease freezes a `herald feed` process (SIGSTOP) while
// it holds a batch it has partly published, lets another feed take its
// partition over after the lease and dispatch everything, then thaws it:
// its publishes in flight are refused by the broker's fence, its late
// completion changes nothing (counted as lease_lost), and every staged id
// is in its channel's history exactly once, in order.
func TestFeedSIGSTOPPastLease(t *testing.T) {
	ctx, dbURL, redisURL, prefix := crashSetup(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	args := feedArgs(dbURL, redisURL, prefix, "--outbox-lanes", "1")
	victim, other := startFeed(t, "victim", args), startFeed(t, "other", args)

	pool := openPool(t, dbURL, crashProducers+2)
	staging := startStaging(t, ctx, cancel, pool)

	// Freeze the victim while it holds a batch of which some records are
	// already in Redis and some not: its publishing is in flight. The
	// victim must itself have published under its lease (a channel's
	// fence in Redis is the lease's): records in Redis may also be a
	// previous holder's, and a claim whose answer the victim had not read
	// when it froze is one it drops on its deadline (the claim failed, for
	// all it knows), so it would have no batch whose loss to count.
	rc := newRedisClient(t, redisURL)
	var held []heldRecord
	var part int
	var fence int64
	waitUntil(t, 90*time.Second, 3*time.Millisecond, "the victim frozen mid-batch", func() (bool, error) {
		victim.p.signal(t, syscall.SIGSTOP)
		hs, err := heldBy(ctx, pool, victim.owner)
		published, own := 0, false
		if err == nil && len(hs) > 0 {
			published, err = markPublished(ctx, rc, prefix, hs)
		}
		if err == nil && len(hs) > 0 && published > 0 && published < len(hs) {
			err = pool.QueryRow(ctx, `SELECT part, fence FROM herald.outbox_partition WHERE owner = $1 AND open`, victim.owner).Scan(&part, &fence)
			if err == nil {
				own, err = publishedUnderLease(ctx, rc, prefix, hs, part, fence)
			}
			if own {
				held = hs
				return true, nil
			}
		}
		victim.p.signal(t, syscall.SIGCONT)
		return false, cmp.Or(err, fmt.Errorf("frozen holding %d claimed records, %d of them published, by the victim: %v", len(hs), published, own))
	})
	t.Logf("froze the victim holding partition %d (fence %d) with %d claimed records", part, fence, len(held))

	// The other feed takes the partition over once the lease expires.
	waitUntil(t, 60*time.Second, 20*time.Millisecond, "the partition taken over", func() (bool, error) {
		var f int64
		err := pool.QueryRow(ctx, `SELECT fence FROM herald.outbox_partition WHERE part = $1`, part).Scan(&f)
		return err == nil && f > fence, err
	})
	<-staging.done
	if err := staging.firstErr(); err != nil {
		t.Fatalf("producer: %v", err)
	}
	waitUntil(t, 4*time.Minute, 50*time.Millisecond, "every record dispatched while the victim is frozen", func() (bool, error) {
		c, err := countStates(ctx, pool)
		return err == nil && c.Dispatched == crashRecords, cmp.Or(err, fmt.Errorf("states %+v", c))
	})

	// Thaw the victim: its late publishes and its completion are refused.
	victim.p.signal(t, syscall.SIGCONT)
	waitUntil(t, 60*time.Second, 50*time.Millisecond, "the victim counting its lost lease", func() (bool, error) {
		n, err := leaseLostCount(victim.ops)
		return err == nil && n > 0, cmp.Or(err, fmt.Errorf("lease_lost %v", n))
	})
	var f2 int64
	testenv.Must(t, pool.QueryRow(ctx, `SELECT fence FROM herald.outbox_partition WHERE part = $1`, part).Scan(&f2), "fence")
	if dups := checkRedisStreams(t, ctx, rc, prefix, staging.log); dups != 0 {
		t.Fatalf("%d duplicate publications in the streams after the frozen feed resumed", dups)
	}
	checkHeld(t, ctx, rc, prefix, held)
	c, err := countStates(ctx, pool)
	testenv.Must(t, err, "count states")
	if c.Dispatched != crashRecords || c.total() != crashRecords {
		t.Fatalf("after the victim resumed: %+v", c)
	}
	checkReady(t, other)
}

// publishedUnderLease reports whether a Worker holding partition part at
// fence has published on one of the channels of held: the channel's
// fence for the partition's scope in Redis is that lease's.
func publishedUnderLease(ctx context.Context, rc *redis.Client, prefix string, held []heldRecord, part int, fence int64) (bool, error) {
	fences := make(map[string]*redis.StringCmd, len(held))
	pipe := rc.Pipeline()
	for _, h := range held {
		if fences[h.channel] == nil {
			meta := strings.TrimSuffix(streamKey(prefix, h.channel), ":stream") + ":meta"
			fences[h.channel] = pipe.HGet(ctx, meta, "f:outbox/p"+strconv.Itoa(part))
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return false, err
	}
	for _, c := range fences {
		v, err := c.Int64()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return false, err
		}
		if v == fence {
			return true, nil
		}
	}
	return false, nil
}

// leaseLostCount reads herald_outbox_outcomes_total{handler="realtime",result="lease_lost"}
// from a feed's /metrics.
func leaseLostCount(ops string) (float64, error) {
	resp, err := http.Get("http://" + ops + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, `herald_outbox_outcomes_total{handler="realtime",result="lease_lost"}`) {
			f := strings.Fields(line)
			return strconv.ParseFloat(f[len(f)-1], 64)
		}
	}
	return 0, cmp.Or(sc.Err(), fmt.Errorf("no lease_lost series"))
}

var _ = (*pgxpool.Pool)(nil)

package crashtest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/internal/testenv"
)

const (
	crashRecords   = 20000
	crashChannels  = 40
	crashProducers = 8
	crashFeeds     = 3
	crashLease     = "2s"
	// crashTestBound bounds one whole feed test (it normally takes about a
	// minute): a failure bound, far above what a busy machine needs, not a
	// budget the test is expected to meet.
	crashTestBound = 8 * time.Minute
)

// feedBanner is the line `herald feed` prints once it runs.
var feedBanner = regexp.MustCompile(`running as (\S+) \(broker: (\S+), ops: (\S+)\)`)

// crashChannel is the name of channel i.
func crashChannel(i int) string { return fmt.Sprintf("orders/c%02d", i) }

// feedNode is one running `herald feed` process.
type feedNode struct {
	p     *proc
	owner string
	ops   string
}

// crashSetup gives a feed crash test a database that herald migrate
// migrated, a Redis key prefix of its own and a context bounded by
// crashTestBound.
func crashSetup(t *testing.T) (ctx context.Context, dbURL, redisURL, prefix string) {
	dbURL = testenv.DatabaseURL(t)
	redisURL, prefix = testenv.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), crashTestBound)
	t.Cleanup(cancel)
	runHerald(t, time.Minute, "migrate", "--database-url", dbURL)
	return ctx, dbURL, redisURL, prefix
}

// feedArgs is the `herald feed` command line the feed tests share:
// PostgreSQL at dbURL, Redis at redisURL under prefix, ops on a free port,
// a crashLease lease, batches of 50 and a 100ms poll, then extra flags.
func feedArgs(dbURL, redisURL, prefix string, extra ...string) []string {
	return append([]string{"feed",
		"--database-url", dbURL, "--redis-url", redisURL, "--redis-key-prefix", prefix,
		"--listen", "127.0.0.1:0", "--outbox-lease", crashLease, "--outbox-batch-size", "50",
		"--outbox-poll-interval", "100ms"}, extra...)
}

// startFeed starts `herald feed` with args as name and waits until it
// runs, on the Redis broker.
func startFeed(t *testing.T, name string, args []string) feedNode {
	t.Helper()
	p := startHerald(t, name, args...)
	m := p.waitStdout(t, feedBanner, 30*time.Second)
	if m[2] != "redis" {
		t.Fatalf("%s runs broker %q, want redis", name, m[2])
	}
	return feedNode{p: p, owner: m[1], ops: m[3]}
}

// crashStaging is crashProducers producers staging crashRecords records
// (produceCrashRecords) while a feed test runs.
type crashStaging struct {
	log  *stagedLog
	done chan struct{} // closed once every producer has returned
	mu   sync.Mutex
	err  error // the first producer error
}

// startStaging starts the producers on pool, staging into a new log. The
// test's cleanup ends them (cancel, which must cancel ctx) and waits.
func startStaging(t *testing.T, ctx context.Context, cancel context.CancelFunc, pool *pgxpool.Pool) *crashStaging {
	s := &crashStaging{log: newStagedLog(), done: make(chan struct{})}
	var producers sync.WaitGroup
	for p := range crashProducers {
		producers.Go(func() {
			if err := produceCrashRecords(ctx, pool, p, s.log); err != nil {
				s.mu.Lock()
				s.err = cmp.Or(s.err, err)
				s.mu.Unlock()
			}
		})
	}
	go func() { producers.Wait(); close(s.done) }()
	t.Cleanup(func() {
		cancel()
		<-s.done
	})
	return s
}

// firstErr is the first producer error so far.
func (s *crashStaging) firstErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// TestFeedSIGKILLMidBatch runs three `herald feed` processes over one
// PostgreSQL outbox and one Redis broker, stages 20,000 records from
// several producers while they run, kills one feed with SIGKILL while it
// holds a claimed batch, restarts it, and checks that every record ends
// dispatched, none is lost or dead-lettered, duplicates repeat the same id
// and data, and each channel's first deliveries follow its commit order.
func TestFeedSIGKILLMidBatch(t *testing.T) {
	ctx, dbURL, redisURL, prefix := crashSetup(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	args := feedArgs(dbURL, redisURL, prefix)
	var feeds []feedNode
	for i := range crashFeeds {
		feeds = append(feeds, startFeed(t, fmt.Sprintf("feed-%d", i), args))
	}
	victim := feeds[1]

	pool := openPool(t, dbURL, crashProducers+2)
	start := time.Now()
	staging := startStaging(t, ctx, cancel, pool)
	log := staging.log

	// Kill the victim in the middle of a batch, with 20–90 % of the records
	// dispatched: freeze its process group with SIGSTOP and look at its
	// leases. Until 40 % it waits for a frozen moment in which it was
	// publishing its batch (some claimed records in Redis, some not: the
	// completion cannot have been sent, so the kill must cause
	// duplicates); after that any moment holding claimed records will do.
	// When the moment is wrong it sends SIGCONT and tries again.
	rc := newRedisClient(t, redisURL)
	lo, mid, hi := crashRecords/5, crashRecords*2/5, crashRecords*9/10
	var (
		killedAt  int
		heldParts map[int]int64 // partition → fence, held by the victim
		held      []heldRecord
	)
	waitUntil(t, 90*time.Second, 3*time.Millisecond, "a moment to kill "+victim.p.name+" mid-batch", func() (bool, error) {
		if err := staging.firstErr(); err != nil {
			t.Fatalf("producer: %v", err)
		}
		dispatched, _, err := victimLeases(ctx, pool, victim.owner)
		if err != nil {
			return false, err
		}
		if dispatched > hi {
			t.Fatalf("%d records dispatched and %s never caught holding a batch in the 20–90 %% window", dispatched, victim.p.name)
		}
		if dispatched < lo {
			return false, fmt.Errorf("%d dispatched", dispatched)
		}
		victim.p.signal(t, syscall.SIGSTOP)
		dispatched, hs, err := victimLeases(ctx, pool, victim.owner)
		published := 0
		if err == nil && len(hs) > 0 {
			published, err = markPublished(ctx, rc, prefix, hs)
		}
		midBatch := published > 0 && published < len(hs)
		if err != nil || len(hs) == 0 || (!midBatch && dispatched < mid) {
			victim.p.signal(t, syscall.SIGCONT)
			return false, cmp.Or(err, fmt.Errorf("%s frozen holding %d claimed records, %d of them published", victim.p.name, len(hs), published))
		}
		parts, err := openPartitions(ctx, pool, victim.owner)
		if err != nil || len(parts) == 0 {
			victim.p.signal(t, syscall.SIGCONT)
			return false, cmp.Or(err, errors.New("frozen holding no partition"))
		}
		victim.p.kill(t)
		killedAt, held, heldParts = dispatched, hs, parts
		return true, nil
	})
	publishedAtKill := 0
	for _, h := range held {
		if h.published {
			publishedAtKill++
		}
	}
	t.Logf("SIGKILLed %s (%s) at %d/%d dispatched, %d staged, while it held %d claimed records, %d of them already in Redis (%v)",
		victim.p.name, victim.owner, killedAt, crashRecords, log.count(), len(held), publishedAtKill, victim.p.err)
	killed := time.Now()
	// The partitions the victim's lanes held move to the other feeds once
	// their lease expires: each is claimed again, with a higher fence.
	waitUntil(t, 60*time.Second, 20*time.Millisecond, "the victim's partitions taken over", func() (bool, error) {
		for part, fence := range heldParts {
			var owner *string
			var f int64
			if err := pool.QueryRow(ctx, `SELECT owner, fence FROM herald.outbox_partition WHERE part = $1`, part).Scan(&owner, &f); err != nil {
				return false, err
			}
			if f <= fence || (owner != nil && strings.HasPrefix(*owner, victim.owner)) {
				return false, fmt.Errorf("partition %d: fence %d, owner %v", part, f, owner)
			}
		}
		return true, nil
	})
	t.Logf("the %d partitions the victim held were taken over %v after the kill (lease %s)",
		len(heldParts), time.Since(killed).Round(time.Millisecond), crashLease)
	restarted := startFeed(t, victim.p.name+"-restarted", args)

	select {
	case <-staging.done:
	case <-ctx.Done():
		t.Fatalf("producers did not finish: %v", ctx.Err())
	}
	if err := staging.firstErr(); err != nil {
		t.Fatalf("producer: %v", err)
	}
	if n := log.count(); n != crashRecords {
		t.Fatalf("staged %d records, want %d", n, crashRecords)
	}
	t.Logf("staged %d records in %v", crashRecords, time.Since(start).Round(time.Millisecond))

	var last stateCounts
	waitUntil(t, 4*time.Minute, 50*time.Millisecond, "every record dispatched", func() (bool, error) {
		c, err := countStates(ctx, pool)
		last = c
		if err != nil {
			return false, err
		}
		if c.DeadLetter > 0 {
			t.Fatalf("%d records dead-lettered: %+v", c.DeadLetter, c)
		}
		return c.Dispatched == crashRecords, fmt.Errorf("states %+v", c)
	})
	t.Logf("all %d records dispatched %v after staging began", crashRecords, time.Since(start).Round(time.Millisecond))
	if last.total() != crashRecords || last.DispatchedNoTime != 0 {
		t.Fatalf("outbox holds %+v, want exactly %d dispatched rows with dispatched_at", last, crashRecords)
	}
	for _, f := range append(feeds, restarted) {
		if f.p == victim.p {
			continue
		}
		if !f.p.running() {
			t.Fatalf("%s exited: %v", f.p.name, f.p.err)
		}
		checkReady(t, f)
	}

	dups := checkRedisStreams(t, ctx, rc, prefix, log)
	if dups != 0 {
		t.Fatalf("%d duplicate publications in the streams: a takeover must not append what the killed feed had published", dups)
	}
	checkHeld(t, ctx, rc, prefix, held)
	t.Logf("each of the %d records the killed feed held (%d already published) is in its stream exactly once", len(held), publishedAtKill)
}

// heldRecord is a record claimed by the victim when it was frozen.
type heldRecord struct {
	id, channel string
	fence       int64
	published   bool // already in its Redis stream
}

// victimLeases returns how many records are dispatched and which are
// claimed by owner.
func victimLeases(ctx context.Context, pool *pgxpool.Pool, owner string) (int, []heldRecord, error) {
	var dispatched int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM herald.outbox_records WHERE state = 'dispatched'`).Scan(&dispatched); err != nil {
		return 0, nil, err
	}
	held, err := heldBy(ctx, pool, owner)
	return dispatched, held, err
}

// heldBy returns the records claimed by owner.
func heldBy(ctx context.Context, pool *pgxpool.Pool, owner string) ([]heldRecord, error) {
	rows, err := pool.Query(ctx, `SELECT id::text, channel, fence FROM herald.outbox_records
		WHERE state = 'processing' AND lease_owner = $1`, owner)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var held []heldRecord
	for rows.Next() {
		var h heldRecord
		if err := rows.Scan(&h.id, &h.channel, &h.fence); err != nil {
			return nil, err
		}
		held = append(held, h)
	}
	return held, rows.Err()
}

// streamKey is the Redis stream of a channel of testTenant.
func streamKey(prefix, channel string) string {
	return prefix + "{" + testTenant + "/" + channel + "}:stream"
}

// hasID reports whether a stream entry's envelope carries id.
func hasID(e redis.XMessage, id string) bool {
	raw, _ := e.Values["e"].(string)
	return strings.Contains(raw, `"id":"`+id+`"`)
}

// markPublished sets published on the held records already in their
// channel's Redis stream (among its latest entries) and counts them. It
// reads each channel's stream once, all in one round trip: the tests
// call it while a feed is frozen, which should be short.
func markPublished(ctx context.Context, rc *redis.Client, prefix string, held []heldRecord) (int, error) {
	streams := make(map[string]*redis.XMessageSliceCmd, len(held))
	pipe := rc.Pipeline()
	for _, h := range held {
		if streams[h.channel] == nil {
			streams[h.channel] = pipe.XRevRangeN(ctx, streamKey(prefix, h.channel), "+", "-", 100)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	n := 0
	for i := range held {
		h := &held[i]
		entries, err := streams[h.channel].Result()
		if err != nil {
			return 0, err
		}
		for _, e := range entries {
			if hasID(e, h.id) {
				h.published = true
				n++
				break
			}
		}
	}
	return n, nil
}

// checkHeld checks that each record the victim held when it was killed is
// in its channel's stream exactly once: the feed that took its partition
// over published its batch again with fanout.Fence.Takeover, which skips
// what the victim had already published.
func checkHeld(t *testing.T, ctx context.Context, rc *redis.Client, prefix string, held []heldRecord) {
	t.Helper()
	for _, h := range held {
		key := streamKey(prefix, h.channel)
		entries, err := rc.XRange(ctx, key, "-", "+").Result()
		if err != nil {
			t.Fatalf("XRANGE %s: %v", key, err)
		}
		seen := 0
		for _, e := range entries {
			if hasID(e, h.id) {
				seen++
			}
		}
		if seen != 1 {
			t.Fatalf("record %s (published before the kill: %v) appears %d times in %s", h.id, h.published, seen, key)
		}
	}
}

// produceCrashRecords stages producer p's share: the channels c with
// c % crashProducers == p, records of each channel one after another, in
// transactions of one to four records.
func produceCrashRecords(ctx context.Context, pool *pgxpool.Pool, p int, log *stagedLog) error {
	var mine []string
	for c := p; c < crashChannels; c += crashProducers {
		mine = append(mine, crashChannel(c))
	}
	return stageShare(ctx, pool, p, log, mine, crashRecords/crashChannels, 0)
}

// checkReady expects 200 from the feed's /readyz.
func checkReady(t *testing.T, f feedNode) {
	t.Helper()
	code, err := httpStatus("http://" + f.ops + "/readyz")
	if err != nil || code != http.StatusOK {
		t.Fatalf("%s /readyz: %d %v", f.p.name, code, err)
	}
}

// checkRedisStreams reads every channel's Redis stream and checks it
// against the staging log. It returns the number of duplicate entries.
func checkRedisStreams(t *testing.T, ctx context.Context, rc *redis.Client, prefix string, log *stagedLog) int {
	t.Helper()
	dups := 0
	for c := range crashChannels {
		ch := crashChannel(c)
		key := streamKey(prefix, ch)
		entries, err := rc.XRange(ctx, key, "-", "+").Result()
		if err != nil {
			t.Fatalf("XRANGE %s: %v", key, err)
		}
		pubs := make([]fanout.Publication, 0, len(entries))
		for i, e := range entries {
			pubs = append(pubs, decodeStreamEntry(t, key, i, e))
		}
		dups += checkChannel(t, ch, pubs, log.byChannel[ch])
	}
	return dups
}

// decodeStreamEntry decodes one stream entry and checks that its id is
// "<offset>-0" with offsets starting at 1 without gaps (nothing trimmed).
func decodeStreamEntry(t *testing.T, key string, i int, e redis.XMessage) fanout.Publication {
	t.Helper()
	raw, ok := e.Values["e"].(string)
	if !ok {
		t.Fatalf("%s entry %s has no envelope field e: %v", key, e.ID, e.Values)
	}
	p, err := fanout.DecodeEnvelope([]byte(raw))
	if err != nil {
		t.Fatalf("%s entry %s: %v", key, e.ID, err)
	}
	if want := strconv.Itoa(i+1) + "-0"; e.ID != want || p.Offset != uint64(i+1) {
		t.Fatalf("%s entry %d has id %s and offset %d, want %s (history trimmed or offsets skipped)", key, i, e.ID, p.Offset, want)
	}
	return p
}

// checkChannel checks one channel's publications against its staged
// records and returns how many publications were duplicates.
func checkChannel(t *testing.T, ch string, pubs []fanout.Publication, staged []stagedRecord) int {
	t.Helper()
	want := make(map[string]stagedRecord, len(staged))
	for _, r := range staged {
		want[r.ID] = r
	}
	first := map[string]fanout.Publication{}
	var order []string
	for _, p := range pubs {
		r, ok := want[p.ID]
		if !ok {
			t.Fatalf("channel %s: offset %d carries id %s that was never staged on it", ch, p.Offset, p.ID)
		}
		if p.Key.Channel != ch || p.Type != "crash.test" || p.SchemaVersion != 1 {
			t.Fatalf("channel %s: offset %d: channel %q type %q v%d", ch, p.Offset, p.Key.Channel, p.Type, p.SchemaVersion)
		}
		if prev, dup := first[p.ID]; dup {
			t.Logf("channel %s: %s at offset %d repeats offset %d", ch, p.ID, p.Offset, prev.Offset)
			if string(prev.Data) != string(p.Data) || !prev.Time.Equal(p.Time) {
				t.Fatalf("channel %s: duplicate of %s at offset %d differs: %s at %v vs %s at %v",
					ch, p.ID, p.Offset, prev.Data, prev.Time, p.Data, p.Time)
			}
			continue
		}
		if !samePayload(r.Payload, p.Data) {
			t.Fatalf("channel %s: id %s carries %s, staged %s", ch, p.ID, p.Data, r.Payload)
		}
		first[p.ID] = p
		order = append(order, p.ID)
	}
	if len(order) != len(staged) {
		missing := 0
		for _, r := range staged {
			if _, ok := first[r.ID]; !ok {
				missing++
			}
		}
		t.Fatalf("channel %s: %d of %d staged records never reached the stream", ch, missing, len(staged))
	}
	for i, r := range staged {
		if order[i] != r.ID {
			t.Fatalf("channel %s: first deliveries out of commit order at position %d: got seq %d, want seq %d",
				ch, i, want[order[i]].Seq, r.Seq)
		}
	}
	return len(pubs) - len(order)
}

// samePayload compares two JSON values semantically (jsonb reorders keys).
func samePayload(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// newRedisClient opens a client closed when t ends.
func newRedisClient(t *testing.T, url string) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("parse redis URL: %v", err)
	}
	rc := redis.NewClient(opt)
	t.Cleanup(func() { _ = rc.Close() })
	return rc
}

// openPartitions returns the partitions whose open batch a lane of owner
// holds, with their fences.
func openPartitions(ctx context.Context, pool *pgxpool.Pool, owner string) (map[int]int64, error) {
	rows, err := pool.Query(ctx, `SELECT part, fence FROM herald.outbox_partition
		WHERE open AND (owner = $1 OR owner LIKE $1 || '/%')`, owner)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	parts := map[int]int64{}
	for rows.Next() {
		var part int
		var fence int64
		if err := rows.Scan(&part, &fence); err != nil {
			return nil, err
		}
		parts[part] = fence
	}
	return parts, rows.Err()
}

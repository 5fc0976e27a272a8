package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
	"github.com/heraldgw/herald/loadtest/internal/cfoutbox"
)

// TestHistogramQuantiles compares the histogram with exact nearest-rank
// quantiles of the same sample: within one bucket (0.8 %), min and max
// exact.
func TestHistogramQuantiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h histogram
	var all []time.Duration
	for range 100_000 {
		// Log-uniform from 1 µs to 1 s: every bucket group is exercised.
		d := time.Duration(float64(time.Microsecond) * math.Pow(10, rng.Float64()*6))
		h.record(d)
		all = append(all, d)
	}
	h.record(0)
	all = append(all, 0)
	slices.Sort(all)
	q := h.summary()
	exact := func(p float64) time.Duration { return all[rank(p, int64(len(all)))-1] }
	for _, c := range []struct {
		name string
		got  time.Duration
		p    float64
	}{{"p50", q.P50, 0.5}, {"p90", q.P90, 0.9}, {"p99", q.P99, 0.99}, {"p99.9", q.P999, 0.999}} {
		want := exact(c.p)
		if diff := (c.got - want).Abs(); float64(diff) > 0.008*float64(want) {
			t.Errorf("%s = %v, exact %v: off by more than one bucket", c.name, c.got, want)
		}
	}
	if q.N != int64(len(all)) || q.Max != all[len(all)-1] || q.Min != 1 {
		t.Errorf("N %d max %v min %v; want %d, %v, 1ns (a 0 is stored as 1ns)", q.N, q.Max, q.Min, len(all), all[len(all)-1])
	}
	if (&histogram{}).summary() != (quantiles{}) {
		t.Error("an empty histogram summarizes to non-zero quantiles")
	}
}

// TestBucketsAreContiguous checks the bucket scheme itself: every value maps
// to a bucket whose midpoint is within half a bucket width of it.
func TestBucketsAreContiguous(t *testing.T) {
	prev := -1
	for v := uint64(0); v < 1<<20; v += 1 + v/1000 {
		i := bucketOf(v)
		if i < prev {
			t.Fatalf("bucketOf(%d) = %d after %d: not monotonic", v, i, prev)
		}
		prev = i
		mid := bucketMid(i)
		if diff := max(mid, v) - min(mid, v); v >= subBuckets && float64(diff) > float64(v)/subBuckets {
			t.Fatalf("value %d in bucket %d with midpoint %d: too far", v, i, mid)
		}
	}
}

func TestPubFields(t *testing.T) {
	fast := []byte(`{"push":"pub","id":"0f8f","channel":"bench/ab/c0","offset":17,"epoch":"a1b2","type":"bench.tick","schema_version":1,"time":"2025-03-01T10:15:30Z","freshness":{"mode":"immediate"},"data":{"t":1740823200123456789,"k":3,"p":"xx"}}`)
	if p, ok := pubFields(fast); !ok || p != (pubInfo{offset: 17, sent: 1740823200123456789, seq: 3}) {
		t.Errorf("fast path: %+v %v", p, ok)
	}
	// A payload that went through the outbox's jsonb column comes back
	// with its keys reordered (shorter first, then bytewise): k, p, t.
	jsonb := []byte(`{"push":"pub","id":"0f8f","channel":"bench/ab/c0","offset":4,"epoch":"a1b2","data":{"k":12,"p":"xxxx","t":1740823200123456789}}`)
	if p, ok := pubFields(jsonb); !ok || p != (pubInfo{offset: 4, sent: 1740823200123456789, seq: 12}) {
		t.Errorf("jsonb order: %+v %v", p, ok)
	}
	if _, _, ok := scanData([]byte(`"k":1,"t":2,"z":3}`)); ok {
		t.Error("scanData accepted an unknown key")
	}
	if _, _, ok := scanData([]byte(`"k":1}`)); ok {
		t.Error("scanData accepted data without t")
	}
	// Another field order (or spacing) takes the JSON path.
	slow := []byte(`{"data": {"k": 3, "t": 42}, "offset": 9}`)
	if p, ok := pubFields(slow); !ok || p != (pubInfo{offset: 9, sent: 42, seq: 3}) {
		t.Errorf("fallback: %+v %v", p, ok)
	}
	if _, ok := pubFields([]byte(`{"push":"pub","offset":3,"data":"not ours"}`)); ok {
		t.Error("a publication without our payload was accepted")
	}
	// What the publisher sends is what the subscriber reads back.
	now := time.Unix(0, 1740823200123456789)
	frame := appendPublish(nil, 5, "bench/ab/c1", now, 7, "")
	if want := `{"id":5,"op":"publish","channel":"bench/ab/c1","type":"bench.tick","schema_version":1,"data":{"t":1740823200123456789,"k":7}}`; string(frame) != want {
		t.Errorf("publish frame\n%s\nwant\n%s", frame, want)
	}
}

// TestTrackBySequence checks the outbox mode of the tracker: publications
// are known by the publisher's sequence number (channel 1 of 3 carries
// k = 1, 4, 7, …), offsets must still rise, and another channel's
// sequence numbers are never expected.
func TestTrackBySequence(t *testing.T) {
	var lat histogram
	s := &subscriber{channel: 1, bySeq: 3}
	now := time.Now()
	get := func(off, seq uint64) bool {
		return s.deliver(pubInfo{offset: off, sent: now.UnixNano(), seq: seq}, now, &lat)
	}
	if !get(1, 4) || !get(2, 1) || !get(3, 7) {
		t.Fatal("a new publication was not counted as new")
	}
	if get(4, 4) { // the same record published again, with a new offset
		t.Error("a repeated sequence number was counted as new")
	}
	if get(5, 2) { // channel 2's
		t.Error("another channel's sequence number was counted as new")
	}
	if !get(3, 10) { // new, but its offset does not rise
		t.Error("sequence 10 was not counted")
	}
	if s.got.Load() != 4 || s.dups != 1 || s.stale != 1 || s.ooo != 1 {
		t.Errorf("got %d dups %d stale %d ooo %d; want 4, 1, 1, 1", s.got.Load(), s.dups, s.stale, s.ooo)
	}
	for _, k := range []uint64{1, 4, 7, 10} {
		if !s.has(k) {
			t.Errorf("has(%d) = false", k)
		}
	}
	if s.has(13) || s.has(2) {
		t.Error("has() reports a publication that never arrived")
	}
	if lat.n.Load() != 4 {
		t.Errorf("%d latency samples, want 4 (new publications only)", lat.n.Load())
	}
}

// TestCommitLog checks commit → client accounting: a delivery read after
// its COMMIT time was recorded is measured at once; one read before is
// settled at the end, as 0 and counted when the COMMIT returned after it.
func TestCommitLog(t *testing.T) {
	l := newCommitLog(commitPageSize + 10)
	s := &subscriber{}
	t0 := time.Unix(1_000_000, 0)
	l.set(3, t0)
	l.observe(s, 3, t0.Add(2*time.Millisecond)) // measured: 2 ms
	l.observe(s, commitPageSize+5, t0)          // COMMIT not yet known
	l.observe(s, 8, t0.Add(time.Millisecond))   // nor this one
	if len(s.early) != 2 {
		t.Fatalf("%d deliveries waiting for their COMMIT time, want 2", len(s.early))
	}
	l.set(commitPageSize+5, t0.Add(time.Millisecond)) // returned after the delivery
	l.set(8, t0.Add(500*time.Microsecond))            // returned before it
	l.set(1<<40, t0)                                  // beyond the run: ignored
	l.settle(s)
	q := l.lat.summary()
	if q.N != 3 || l.before.Load() != 1 || q.Min != 1 || q.Max != 2*time.Millisecond {
		t.Errorf("N %d, before COMMIT %d, min %v, max %v; want 3, 1, 1ns (a 0), 2ms", q.N, l.before.Load(), q.Min, q.Max)
	}
	if l.at(1<<40) != 0 || l.at(99) != 0 {
		t.Error("a COMMIT time was reported for a sequence number never set")
	}
}

func TestEachFrame(t *testing.T) {
	var got []string
	eachFrame([]byte("{\"a\":1}\n{\"b\":2}\n\n{\"c\":3}"), func(f []byte) { got = append(got, string(f)) })
	if !slices.Equal(got, []string{`{"a":1}`, `{"b":2}`, `{"c":3}`}) {
		t.Errorf("frames %q", got)
	}
}

func TestParseSample(t *testing.T) {
	sc := scrape{}
	for _, l := range []string{
		"# HELP x y",
		`herald_disconnects_total{reason="slow",transport="ws"} 3`,
		`herald_disconnects_total{reason="shutdown",transport="ws"} 1`,
		`herald_disconnects_total{reason="slow",transport="sse"} 5`,
		"go_goroutines 21",
		"go_memstats_heap_inuse_bytes 2.195456e+06",
	} {
		if s, ok := parseSample(l); ok {
			sc = append(sc, s)
		}
	}
	if v, ok := sc.value("go_memstats_heap_inuse_bytes", nil); !ok || v != 2195456 {
		t.Errorf("heap %v %v", v, ok)
	}
	if v, _ := sc.value("herald_disconnects_total", map[string]string{"reason": "slow"}); v != 8 {
		t.Errorf("slow over both transports = %v, want 8", v)
	}
	by := sc.byLabel("herald_disconnects_total", "reason", map[string]string{"transport": "ws"})
	if by["slow"] != 3 || by["shutdown"] != 1 || len(by) != 2 {
		t.Errorf("ws disconnects by reason %v", by)
	}
}

func TestConfigKeepsLoadOnLoopback(t *testing.T) {
	for _, u := range []string{"http://127.0.0.1:8080", "http://localhost:8080", "http://[::1]:8080", "http://127.0.0.2:1"} {
		if err := loopbackURL(u); err != nil {
			t.Errorf("%s refused: %v", u, err)
		}
	}
	for _, u := range []string{"http://10.0.0.1:8080", "http://192.168.1.1", "http://example.com", "https://127.0.0.1", "ftp://127.0.0.1"} {
		if loopbackURL(u) == nil {
			t.Errorf("%s accepted", u)
		}
	}
	cfg := defaultConfig()
	cfg.Conns, cfg.Duration = maxConns+1, maxDuration+time.Second
	cfg.URL = "http://127.0.0.1:8080" // and no secret
	if err := cfg.validate(); err == nil {
		t.Error("an unbounded run without a secret validated")
	}
}

// configCase is a change to the default config and what validate says.
type configCase struct {
	name string
	edit func(*config)
	want string // "" = valid; else a piece of the error
}

func checkConfigs(t *testing.T, cases []configCase) {
	t.Helper()
	for _, c := range cases {
		cfg := defaultConfig()
		c.edit(&cfg)
		err := cfg.validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

func TestConfigPublishVia(t *testing.T) {
	const pg = "postgres://postgres@127.0.0.1:5432/test"
	checkConfigs(t, []configCase{
		{"default is ws", func(c *config) {}, ""},
		{"outbox with a child", func(c *config) { c.PublishVia, c.DatabaseURL = "outbox", pg }, ""},
		{"outbox with -url", func(c *config) {
			c.PublishVia, c.DatabaseURL, c.URL, c.Secret = "outbox", pg, "http://127.0.0.1:8080", "s"
		}, ""},
		{"unknown value", func(c *config) { c.PublishVia = "http" }, `-publish-via "http": want ws or outbox`},
		{"outbox without a database", func(c *config) { c.PublishVia = "outbox" }, "-publish-via outbox needs -database-url"},
		{"outbox on SQLite", func(c *config) { c.PublishVia, c.DatabaseURL = "outbox", "file:herald.db" }, "needs a postgres:// URL"},
		{"outbox idle", func(c *config) { c.PublishVia, c.DatabaseURL, c.Scenario = "outbox", pg, "idle" }, "-scenario idle publishes nothing"},
		{"outbox serve-only", func(c *config) { c.PublishVia, c.DatabaseURL, c.ServeOnly = "outbox", pg, true }, "-serve-only publishes nothing"},
		{"outbox too many", func(c *config) {
			c.PublishVia, c.DatabaseURL, c.Rate, c.Duration = "outbox", pg, maxRate, maxDuration
		}, "publications; at most"},
		{"no producers", func(c *config) { c.PublishVia, c.DatabaseURL, c.Producers = "outbox", pg, 0 }, "-producers 0: must be 1–64"},
		{"too many producers", func(c *config) { c.Producers = maxProducers + 1 }, "-producers 65"},
		{"ws with -url takes no database", func(c *config) {
			c.DatabaseURL, c.URL, c.Secret = pg, "http://127.0.0.1:8080", "s"
		}, "with -url it is only for -publish-via outbox"},
	})
}

func TestCentrifugoPubFields(t *testing.T) {
	push := []byte(`{"push":{"channel":"bench:ab-c0","pub":{"data":{"t":1740823200123456789,"k":3,"p":"xx"},"offset":17}}}`)
	if p, ok := cfPubFields(push); !ok || p != (pubInfo{offset: 17, sent: 1740823200123456789, seq: 3}) {
		t.Errorf("fast path: %+v %v", p, ok)
	}
	// Another field order takes the JSON path.
	slow := []byte(`{"push":{"channel":"bench:ab-c0","pub":{"offset":9,"data":{"k":3,"t":42}}}}`)
	if p, ok := cfPubFields(slow); !ok || p != (pubInfo{offset: 9, sent: 42, seq: 3}) {
		t.Errorf("fallback: %+v %v", p, ok)
	}
	for _, f := range []string{`{}`, `{"id":2,"subscribe":{"offset":3}}`, `{"push":{"pub":{"data":"not ours","offset":3}}}`} {
		if _, ok := cfPubFields([]byte(f)); ok {
			t.Errorf("%s taken for a publication", f)
		}
	}
}

func TestConfigServer(t *testing.T) {
	checkConfigs(t, []configCase{
		{"centrifugo", func(c *config) { c.Server = "centrifugo" }, ""},
		{"centrifugo idle at the largest size", func(c *config) { c.Server, c.Scenario, c.Conns = "centrifugo", "idle", maxConns }, ""},
		{"unknown server", func(c *config) { c.Server = "nats" }, `-server "nats": want herald or centrifugo`},
		{"centrifugo over SSE", func(c *config) { c.Server, c.Transport = "centrifugo", "sse" }, "only -transport ws"},
		{"centrifugo via the outbox", func(c *config) {
			c.Server, c.PublishVia, c.DatabaseURL = "centrifugo", "outbox", "postgres://127.0.0.1/test"
		}, ""},
		{"centrifugo via the outbox without a database", func(c *config) {
			c.Server, c.PublishVia = "centrifugo", "outbox"
		}, "-publish-via outbox needs -database-url"},
		{"centrifugo with a database but the server API", func(c *config) {
			c.Server, c.DatabaseURL = "centrifugo", "postgres://127.0.0.1/test"
		}, "-database-url is for -publish-via outbox only"},
		{"centrifugo outbox shape out of bounds", func(c *config) {
			c.Server, c.PublishVia, c.DatabaseURL = "centrifugo", "outbox", "postgres://127.0.0.1/test"
			c.CFBatch, c.CFPartitions, c.CFPollInterval = 0, 257, 0
		}, "-centrifugo-batch 0"},
		{"centrifugo outbox partitions out of bounds", func(c *config) {
			c.Server, c.PublishVia, c.DatabaseURL, c.CFPartitions = "centrifugo", "outbox", "postgres://127.0.0.1/test", 0
		}, "-centrifugo-partitions 0: must be 1–256"},
		{"centrifugo outbox poll out of bounds", func(c *config) {
			c.Server, c.PublishVia, c.DatabaseURL, c.CFPollInterval = "centrifugo", "outbox", "postgres://127.0.0.1/test", time.Microsecond
		}, "-centrifugo-poll-interval 1µs"},
		{"centrifugo by URL", func(c *config) {
			c.Server, c.URL, c.Secret = "centrifugo", "http://127.0.0.1:8000", "s"
		}, "starts its own child"},
		{"centrifugo without a binary", func(c *config) { c.Server, c.CentrifugoBin = "centrifugo", "" }, "needs -centrifugo-bin"},
		{"burst via the outbox", func(c *config) {
			c.PublishVia, c.DatabaseURL, c.Burst = "outbox", "postgres://127.0.0.1/test", 50_000
		}, ""},
		{"burst over the WebSocket publish op", func(c *config) { c.Burst = 10 }, "-burst: only with -publish-via outbox"},
		{"negative burst", func(c *config) {
			c.PublishVia, c.DatabaseURL, c.Burst = "outbox", "postgres://127.0.0.1/test", -1
		}, "-burst -1: must be ≥ 0"},
		{"burst beyond what a subscriber tracks", func(c *config) {
			c.PublishVia, c.DatabaseURL, c.Burst = "outbox", "postgres://127.0.0.1/test", maxTracked+1
		}, "at most"},
	})
}

// TestCentrifugoOutboxConfig: with -publish-via outbox, Centrifugo's config
// gets one postgresql consumer of the run's own table in the
// -database-url database, in cfbench's best shape by default.
func TestCentrifugoOutboxConfig(t *testing.T) {
	cfg := defaultConfig()
	cfg.Server, cfg.PublishVia, cfg.DatabaseURL = "centrifugo", "outbox", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	c := cfOutboxConsumer(cfg)
	if err := c.Outbox.Validate(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(c.Outbox.Table, "connbench_cf_") || c.Outbox.Notify != c.Outbox.Table || c.Name != "connbench_"+strings.TrimPrefix(c.Outbox.Table, "connbench_cf_") {
		t.Errorf("names: consumer %q, table %q, notify %q", c.Name, c.Outbox.Table, c.Outbox.Notify)
	}
	if other := cfOutboxConsumer(cfg); other.Outbox.Table == c.Outbox.Table {
		t.Errorf("two runs share table %s", c.Outbox.Table)
	}
	b, err := cfConfig(8123, "secret", "key", &c)
	if err != nil {
		t.Fatal(err)
	}
	var got benchkit.CentrifugoConfig
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.HTTPServer.Port != 8123 || got.HTTPAPI.Key != "key" || len(got.Channel.Namespaces) != 1 || got.Channel.Namespaces[0].Name != cfNamespace || got.Channel.Namespaces[0].HistorySize == 0 || !got.Prometheus.Enabled || got.Log.Level != "warn" {
		t.Errorf("server settings: %s", b)
	}
	want := cfoutbox.ConsumerConfig{Name: c.Name, Enabled: true, Type: "postgresql", PostgreSQL: cfoutbox.PostgreSQLConfig{
		DSN: cfg.DatabaseURL, OutboxTableName: c.Outbox.Table, NumPartitions: 4, PartitionSelectLimit: 1000,
		PartitionPollInterval: "300ms", PartitionNotificationChannel: c.Outbox.Table,
	}}
	if len(got.Consumers) != 1 || got.Consumers[0] != want {
		t.Errorf("consumers: %s", b)
	}
	// Without the outbox: no consumer.
	if b, _ := cfConfig(8123, "secret", "key", nil); strings.Contains(string(b), "consumers") {
		t.Errorf("a consumer without -publish-via outbox: %s", b)
	}
	// Polling only: no trigger, no LISTEN channel.
	cfg.CFNotify = false
	if c := cfOutboxConsumer(cfg); c.Outbox.Notify != "" || strings.Contains(strings.Join(c.Outbox.CreateStatements(), " "), "pg_notify") {
		t.Errorf("-centrifugo-notify=false: %+v", c.Outbox)
	}
}

// TestCentrifugoOutboxRecord: the publish command a producer inserts
// carries the data Herald's producers stage ({"t":…,"k":…}), which comes
// back in the publication push with k; a channel's records all go to one
// partition.
func TestCentrifugoOutboxRecord(t *testing.T) {
	begin := time.Unix(0, 1740823200123456789)
	data := appendData(nil, begin, 10007, "")
	rec := cfoutbox.AppendPublish(nil, "bench:ab12-c7", data)
	if want := `{"channel":"bench:ab12-c7","data":{"t":1740823200123456789,"k":10007}}`; string(rec) != want {
		t.Fatalf("record %s, want %s", rec, want)
	}
	var cmd struct {
		Channel string          `json:"channel"`
		Data    json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(rec, &cmd); err != nil || cmd.Channel != "bench:ab12-c7" {
		t.Fatalf("record %s: %+v %v", rec, cmd, err)
	}
	// Centrifugo publishes data as it is; its push carries it before the offset.
	push := []byte(`{"push":{"channel":"bench:ab12-c7","pub":{"data":` + string(cmd.Data) + `,"offset":3}}}`)
	if p, ok := cfPubFields(push); !ok || p != (pubInfo{offset: 3, sent: begin.UnixNano(), seq: 10007}) {
		t.Errorf("push of the record: %+v %v", p, ok)
	}
	// Round-robin publication k goes to channel k mod C; its partition
	// is the channel's, which with C = 5,000 and 4 partitions is k mod 4.
	const channels, partitions = 5000, 4
	for k := range 3 * channels {
		c := k % channels
		if cfPartition(c, partitions) != k%partitions {
			t.Fatalf("publication %d: partition %d, want %d", k, cfPartition(c, partitions), k%partitions)
		}
	}
	seen := map[int]int{}
	for k := 0; k < 3*7; k++ {
		c := k % 7 // 7 channels over 4 partitions: a channel still keeps one
		p := cfPartition(c, partitions)
		if q, ok := seen[c]; ok && q != p {
			t.Fatalf("channel %d in partitions %d and %d", c, q, p)
		}
		seen[c] = p
	}
}

// TestStageDecomposition joins a stage trace with COMMIT and receive
// times: each stage is measured per publication, and the tail names the
// stage that made it slow.
func TestStageDecomposition(t *testing.T) {
	const n = 200
	commits := newCommitLog(n)
	recv := newTimeLog(n)
	trace := make(map[uint64][2]int64)
	base := int64(1_000_000_000_000)
	ms := int64(time.Millisecond)
	for k := range uint64(n) {
		c := base + int64(k)*ms
		worker, broker, client := ms, ms/10, ms/2
		if k == 7 || k == 8 { // the two slowest: the Worker's fault
			worker = 50 * ms
		}
		if k == 9 { // the client's
			client = 30 * ms
		}
		commits.set(k, time.Unix(0, c))
		trace[k] = [2]int64{c + worker, c + worker + broker}
		if k != 5 { // never read: left out
			recv.setNs(k, c+worker+broker+client)
		}
	}
	rep := decompose(trace, commits, &recv, n)
	if rep.n != n-1 {
		t.Fatalf("%d publications joined, want %d", rep.n, n-1)
	}
	if got := sortedQuantile(rep.worker, 0.5); got != int(ms) {
		t.Errorf("worker p50 %d, want %d", got, ms)
	}
	if got := sortedQuantile(rep.total, 1); got != int(50*ms+ms/10+ms/2) {
		t.Errorf("total max %d", got)
	}
	// p99 of 199 is the 198th value: the tail holds the two slowest.
	if rep.tailN != 2 || rep.tailWorst != [3]int{2, 0, 0} {
		t.Errorf("tail %d publications, largest stages %v; want 2, worker in both", rep.tailN, rep.tailWorst)
	}

	// Publish ran for 0.1 ms from c+worker: for the 199 publications
	// read, of which 7 and 8 ran at once with 56 and 57.
	if want := 197 * time.Millisecond / 10; rep.busy != want {
		t.Errorf("busy %v, want %v", rep.busy, want)
	}
	// The timeline: every hand-over and read, sorted; a row of marks and
	// one of the longest pause between hand-overs.
	if len(rep.ins) != n-1 || !slices.IsSorted(rep.ins) || !slices.IsSorted(rep.recvs) {
		t.Fatalf("timeline of %d hand-overs, sorted %v", len(rep.ins), slices.IsSorted(rep.ins))
	}
	if gap, _ := maxGap([]int64{10, 12, 30, 31}); gap != 18 {
		t.Errorf("longest gap %d, want 18", gap)
	}
	var rows []string
	rep.printTimeline(func(k, format string, a ...any) { rows = append(rows, k+": "+fmt.Sprintf(format, a...)) }, time.Unix(0, base))
	if len(rows) != 2 || !strings.Contains(rows[0], "100 %: ") || !strings.Contains(rows[1], "pause") {
		t.Errorf("timeline rows %q", rows)
	}
	if _, busy := busyUnion([]stageSpan{{in: 10, out: 20}, {in: 15, out: 30}, {in: 12, out: 14}, {in: 40, out: 41}}); busy != 21 {
		t.Errorf("union of overlapping intervals %d ns, want 21", busy)
	}

	// The file the diagnostic build writes reads back as the map.
	path := filepath.Join(t.TempDir(), "trace")
	var b []byte
	for _, e := range [][3]int64{{3, 10, 20}, {4, 30, 40}} {
		for _, v := range e {
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		}
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := readStageTrace(path)
	if err != nil || len(got) != 2 || got[3] != [2]int64{10, 20} || got[4] != [2]int64{30, 40} {
		t.Errorf("readStageTrace = %v, %v", got, err)
	}
}

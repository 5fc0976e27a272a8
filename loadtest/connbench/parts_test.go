package main

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
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
	}{{"p50", q.P50, 0.5}, {"p99", q.P99, 0.99}, {"p99.9", q.P999, 0.999}} {
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
	off, sent, ok := pubFields(fast)
	if !ok || off != 17 || sent != 1740823200123456789 {
		t.Errorf("fast path: %d %d %v", off, sent, ok)
	}
	// Another field order (or spacing) takes the JSON path.
	slow := []byte(`{"data": {"k": 3, "t": 42}, "offset": 9}`)
	if off, sent, ok := pubFields(slow); !ok || off != 9 || sent != 42 {
		t.Errorf("fallback: %d %d %v", off, sent, ok)
	}
	if _, _, ok := pubFields([]byte(`{"push":"pub","offset":3,"data":"not ours"}`)); ok {
		t.Error("a publication without our payload was accepted")
	}
	// What the publisher sends is what the subscriber reads back.
	now := time.Unix(0, 1740823200123456789)
	frame := appendPublish(nil, 5, "bench/ab/c1", now, 7, "")
	if want := `{"id":5,"op":"publish","channel":"bench/ab/c1","type":"bench.tick","schema_version":1,"data":{"t":1740823200123456789,"k":7}}`; string(frame) != want {
		t.Errorf("publish frame\n%s\nwant\n%s", frame, want)
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

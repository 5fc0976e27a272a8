package main

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// A histogram of durations in log-linear buckets: values below 2^subBits
// ns have a bucket each; above, every power of two is split into
// 2^subBits equal buckets, so a bucket is at most 1/2^subBits (0.8 %) of
// its value wide. Counts are atomic, so every subscriber goroutine records
// into one histogram; memory stays fixed however many deliveries a run
// makes (a million-sample slice per run would not).
const (
	subBits    = 7
	subBuckets = 1 << subBits
	// groups covers durations up to 2^(groups+subBits-1) ns, about 4.6
	// minutes: longer than any run.
	groups = 32
)

type histogram struct {
	counts [groups * subBuckets]atomic.Uint64
	n      atomic.Int64
	min    atomic.Int64 // ns; 0 = none yet (a recorded 0 is stored as 1)
	max    atomic.Int64 // ns
}

// bucketOf returns the bucket index of v ns (v ≥ 0).
func bucketOf(v uint64) int {
	if v < subBuckets {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1 // v>>shift is in [subBuckets, 2*subBuckets)
	i := (shift+1)*subBuckets + int(v>>shift) - subBuckets
	return min(i, groups*subBuckets-1)
}

// bucketMid is the midpoint of bucket i, in ns: what a quantile that falls
// in the bucket reports.
func bucketMid(i int) uint64 {
	if i < subBuckets {
		return uint64(i)
	}
	shift := i/subBuckets - 1
	low := uint64(i%subBuckets+subBuckets) << shift
	return low + (uint64(1)<<shift)/2
}

// record adds one duration; negative ones (clock steps) count as 0.
func (h *histogram) record(d time.Duration) {
	v := max(int64(d), 0)
	h.counts[bucketOf(uint64(v))].Add(1)
	h.n.Add(1)
	stored := max(v, 1)
	for {
		cur := h.min.Load()
		if (cur != 0 && cur <= stored) || h.min.CompareAndSwap(cur, stored) {
			break
		}
	}
	for {
		cur := h.max.Load()
		if cur >= v || h.max.CompareAndSwap(cur, v) {
			break
		}
	}
}

// quantiles summarizes a histogram. Min and Max are exact; the others are
// the midpoint of the bucket holding the nearest-rank sample.
type quantiles struct {
	N                             int64
	Min, P50, P90, P99, P999, Max time.Duration
}

func (h *histogram) summary() quantiles {
	n := h.n.Load()
	if n == 0 {
		return quantiles{}
	}
	q := quantiles{N: n, Min: time.Duration(h.min.Load()), Max: time.Duration(h.max.Load())}
	ranks := []struct {
		p   float64
		dst *time.Duration
	}{{0.50, &q.P50}, {0.90, &q.P90}, {0.99, &q.P99}, {0.999, &q.P999}}
	var seen int64
	r := 0
	for i := range h.counts {
		seen += int64(h.counts[i].Load())
		for r < len(ranks) && seen >= rank(ranks[r].p, n) {
			// Clamp to the exact extremes: a bucket's midpoint may lie
			// beyond the largest (or below the smallest) value recorded.
			*ranks[r].dst = min(max(time.Duration(bucketMid(i)), q.Min), q.Max)
			r++
		}
	}
	return q
}

// rank is the nearest rank of quantile p among n samples (1-based).
func rank(p float64, n int64) int64 {
	k := int64(p*float64(n) + 0.999999)
	return min(max(k, 1), n)
}

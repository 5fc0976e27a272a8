package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// With -stages the child is a diagnostic herald (built with -tags
// heraldstages, cmd/herald/stagetrace.go) that records, for each record
// its realtime Worker publishes, when the Worker handed it to the broker
// and when the broker's Publish returned; the subscribers record when they
// read each publication. Joined by sequence number with the COMMIT times,
// that splits commit → client into three stages:
//
//   - worker: COMMIT returned → the Worker hands the record to the broker
//     (the wake-up, the claim, decoding);
//   - broker: the broker's Publish (offset, history, the hub's fan-out: the
//     direct write to the socket, or the queue of a connection whose
//     writer runs);
//   - client: Publish returned → the subscriber read the publication (a
//     queued publication's writer, the loopback socket, the subscriber's
//     goroutine being scheduled and parsing).

// stageTraceEnv names the file the diagnostic build writes its timings to.
const stageTraceEnv = "CONNBENCH_STAGE_TRACE"

// stageSpan is one publication's times, Unix ns.
type stageSpan struct {
	commit, in, out, recv int64
}

// stageReport is the decomposition of commit → client.
type stageReport struct {
	n                      int   // publications with every time known
	early                  int   // of them, handed to the broker before their COMMIT returned
	worker, broker, client []int // ns, sorted: the three stages (negative ones as 0)
	total                  []int // ns, sorted: commit → client
	// tail: the publications at or above the p99 of commit → client.
	tailN                          int
	tailWorker, tailBroker, tailCl []int  // their stages, sorted
	tailWorst                      [3]int // how many had each stage as their largest
	firstIn                        int64  // the earliest hand-over to the broker (Unix ns)
	lastOut                        int64  // the latest return from Publish (Unix ns)
	// busy is how long at least one Publish was under way between firstIn
	// and lastOut: the rest of that time the Worker published nothing.
	busy time.Duration
	// ins, outs and recvs are every publication's hand-over, Publish
	// return and read, Unix ns, sorted: the run's timeline (print).
	ins, outs, recvs []int64
}

// readStageTrace reads the diagnostic build's file: sequence number, Unix
// ns in, Unix ns out, three little-endian 64-bit words per record.
func readStageTrace(path string) (map[uint64][2]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("connbench: -stages: %w (is the herald binary built with -tags heraldstages?)", err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<16)
	out := make(map[uint64][2]int64)
	var b [24]byte
	for {
		if _, err := io.ReadFull(br, b[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("connbench: -stages: reading %s: %w", path, err)
		}
		seq := binary.LittleEndian.Uint64(b[0:])
		out[seq] = [2]int64{int64(binary.LittleEndian.Uint64(b[8:])), int64(binary.LittleEndian.Uint64(b[16:]))}
	}
}

// decompose joins the server's times with the COMMIT and receive times of
// the publications 0…n-1.
func decompose(trace map[uint64][2]int64, commits *commitLog, recv *timeLog, n int) stageReport {
	var spans []stageSpan
	var rep stageReport
	for seq := range uint64(n) {
		c, r := commits.at(seq), recv.at(seq)
		t, ok := trace[seq]
		if c == 0 || r == 0 || !ok {
			continue
		}
		spans = append(spans, stageSpan{c, t[0], t[1], r})
		if rep.firstIn == 0 || t[0] < rep.firstIn {
			rep.firstIn = t[0]
		}
	}
	rep.n = len(spans)
	if rep.n == 0 {
		return rep
	}
	rep.lastOut, rep.busy = busyUnion(spans)
	nn := func(v int64) int { return int(max(v, 0)) }
	for _, s := range spans {
		if s.in < s.commit {
			rep.early++
		}
		rep.worker = append(rep.worker, nn(s.in-s.commit))
		rep.broker = append(rep.broker, nn(s.out-s.in))
		rep.client = append(rep.client, nn(s.recv-s.out))
		rep.total = append(rep.total, nn(s.recv-s.commit))
		rep.ins = append(rep.ins, s.in)
		rep.outs = append(rep.outs, s.out)
		rep.recvs = append(rep.recvs, s.recv)
	}
	for _, v := range [][]int64{rep.ins, rep.outs, rep.recvs} {
		slices.Sort(v)
	}
	p99 := sortedQuantile(slices.Sorted(slices.Values(rep.total)), 0.99)
	for i := range spans {
		if rep.total[i] < p99 {
			continue
		}
		rep.tailN++
		st := [3]int{rep.worker[i], rep.broker[i], rep.client[i]}
		rep.tailWorker = append(rep.tailWorker, st[0])
		rep.tailBroker = append(rep.tailBroker, st[1])
		rep.tailCl = append(rep.tailCl, st[2])
		rep.tailWorst[slices.Index(st[:], slices.Max(st[:]))]++
	}
	for _, v := range [][]int{rep.worker, rep.broker, rep.client, rep.total, rep.tailWorker, rep.tailBroker, rep.tailCl} {
		slices.Sort(v)
	}
	return rep
}

// busyUnion returns the latest end of the spans' Publish intervals
// [in, out] and the length of their union.
func busyUnion(spans []stageSpan) (lastOut int64, busy time.Duration) {
	iv := make([][2]int64, len(spans))
	for i, s := range spans {
		iv[i] = [2]int64{s.in, max(s.out, s.in)}
	}
	slices.SortFunc(iv, func(a, b [2]int64) int { return int(a[0] - b[0]) })
	var end int64
	for _, v := range iv {
		switch {
		case v[0] > end:
			busy += time.Duration(v[1] - v[0])
			end = v[1]
		case v[1] > end:
			busy += time.Duration(v[1] - end)
			end = v[1]
		}
	}
	return end, busy
}

// sortedQuantile is the nearest-rank quantile p of sorted v.
func sortedQuantile(v []int, p float64) int {
	if len(v) == 0 {
		return 0
	}
	return v[rank(p, int64(len(v)))-1]
}

// print writes the decomposition as rows of the report.
func (rep *stageReport) print(row func(k, format string, a ...any), firstCommit time.Time) {
	if rep.n == 0 {
		row("stages (-stages)", "n/a: no publication had its COMMIT, broker and receive times all known")
		return
	}
	q := func(v []int) string {
		return fmt.Sprintf("%s / %s / %s / %s", ms(time.Duration(sortedQuantile(v, 0.5))), ms(time.Duration(sortedQuantile(v, 0.9))),
			ms(time.Duration(sortedQuantile(v, 0.99))), ms(time.Duration(sortedQuantile(v, 1))))
	}
	row("stages, p50 / p90 / p99 / max: COMMIT returned → Worker hands to broker", "%s (%d publications; %d handed over before their COMMIT returned, as 0)", q(rep.worker), rep.n, rep.early)
	row("stages: broker Publish (history, hub, direct write or queue)", "%s", q(rep.broker))
	row("stages: Publish returned → subscriber read", "%s", q(rep.client))
	row("stages: COMMIT returned → subscriber read (these publications)", "%s", q(rep.total))
	mean := func(v []int) time.Duration {
		s := 0
		for _, x := range v {
			s += x
		}
		return time.Duration(s / max(len(v), 1))
	}
	row("**tail: the publications at or above the p99 of COMMIT → read**, worker / broker / client, median (mean)",
		"%d publications: **%s (%s) / %s (%s) / %s (%s)**; the largest stage was worker in %d, broker in %d, client in %d",
		rep.tailN, ms(time.Duration(sortedQuantile(rep.tailWorker, 0.5))), ms(mean(rep.tailWorker)),
		ms(time.Duration(sortedQuantile(rep.tailBroker, 0.5))), ms(mean(rep.tailBroker)),
		ms(time.Duration(sortedQuantile(rep.tailCl, 0.5))), ms(mean(rep.tailCl)),
		rep.tailWorst[0], rep.tailWorst[1], rep.tailWorst[2])
	if !firstCommit.IsZero() && rep.firstIn != 0 {
		row("stages: first COMMIT sent → first record handed to the broker", "%s", ms(time.Unix(0, rep.firstIn).Sub(firstCommit)))
	}
	if span := time.Duration(rep.lastOut - rep.firstIn); span > 0 && !firstCommit.IsZero() {
		row("stages: first hand-over → last Publish returned; of it, some Publish under way (the rest: the Worker published nothing)",
			"%s; %s (%.0f %%)", ms(span), ms(rep.busy), 100*rep.busy.Seconds()/span.Seconds())
	}
	if !firstCommit.IsZero() {
		rep.printTimeline(row, firstCommit)
	}
}

// timelineMarks are the shares of the publications the timeline marks.
var timelineMarks = []float64{0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 1}

// printTimeline writes when, from the first COMMIT sent, each share of
// the publications had been handed to the broker, had its Publish
// return and had been read, and the longest pause between two
// hand-overs: where a drain's time went between the Worker and the
// delivery.
func (rep *stageReport) printTimeline(row func(k, format string, a ...any), firstCommit time.Time) {
	at := func(v []int64, q float64) string {
		return ms(time.Unix(0, v[rank(q, int64(len(v)))-1]).Sub(firstCommit))
	}
	var b strings.Builder
	for i, q := range timelineMarks {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%g %%: %s / %s / %s", 100*q, at(rep.ins, q), at(rep.outs, q), at(rep.recvs, q))
	}
	row("timeline from the first COMMIT sent: share of the publications handed to the broker / Publish returned / read", "%s", b.String())
	gap, from := maxGap(rep.ins)
	if gap > 0 {
		row("stages: the longest pause between two hand-overs to the broker", "%s, from %s after the first COMMIT",
			ms(gap), ms(time.Unix(0, from).Sub(firstCommit)))
	}
}

// maxGap returns the longest interval between consecutive times of sorted
// v, and where it began.
func maxGap(v []int64) (time.Duration, int64) {
	var gap, from int64
	for i := 1; i < len(v); i++ {
		if d := v[i] - v[i-1]; d > gap {
			gap, from = d, v[i-1]
		}
	}
	return time.Duration(gap), from
}

// addStages stops the child, which then writes its timings, and joins
// them with the run's.
func addStages(res *result, tgt *target) error {
	if err := tgt.stop(); err != nil {
		return err
	}
	defer os.Remove(tgt.stagePath)
	trace, err := readStageTrace(tgt.stagePath)
	if err != nil {
		return err
	}
	if res.commitLog == nil || res.recvLog == nil {
		return fmt.Errorf("connbench: -stages: the run kept no COMMIT or receive times")
	}
	rep := decompose(trace, res.commitLog, res.recvLog, res.cfg.publications())
	res.stages = &rep
	return nil
}

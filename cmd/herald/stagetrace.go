//go:build heraldstages

package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/outboxfeed"
)

// A diagnostic build (go build -tags heraldstages ./cmd/herald) times the
// realtime Worker's publications for loadtest/connbench -stages: for every
// record whose message id ends in 12 hexadecimal digits (connbench's
// sequence number), when the Worker handed it to the broker and when the
// broker's Publish returned (the memory broker returns once the hub has
// handed it to every local connection: written to the socket, or queued
// for the connection's writer). With CONNBENCH_STAGE_TRACE set to a file
// name, serve writes the timings there as it stops, three little-endian
// 64-bit words per record: sequence number, Unix ns in, Unix ns out.
// Without the tag none of this is built.

// stageTraceCap bounds the records timed (24 MiB).
const stageTraceCap = 1 << 20

type stageEntry struct{ seq, in, out int64 }

var stageTrace struct {
	path    string
	n       atomic.Int64
	entries []stageEntry
}

func init() {
	if p := os.Getenv("CONNBENCH_STAGE_TRACE"); p != "" {
		stageTrace.path = p
		stageTrace.entries = make([]stageEntry, stageTraceCap)
	}
}

type stagePub struct{ next outboxfeed.Publisher }

func (p stagePub) Publish(ctx context.Context, msg fanout.Message) (fanout.Publication, error) {
	in := time.Now().UnixNano()
	pub, err := p.next.Publish(ctx, msg)
	if err == nil {
		recordStage(msg.ID, in, time.Now().UnixNano())
	}
	return pub, err
}

// PublishRun times a run (fanout.RunPublisher) as one hand-over: every
// record of it in and out together. A broker without runs gets each
// record's Publish.
func (p stagePub) PublishRun(ctx context.Context, msgs []fanout.Message, out []fanout.Publication) (int, error) {
	rp, ok := p.next.(fanout.RunPublisher)
	if !ok {
		for i := range msgs {
			pub, err := p.Publish(ctx, msgs[i])
			if err != nil {
				return i, err
			}
			out[i] = pub
		}
		return len(msgs), nil
	}
	in := time.Now().UnixNano()
	n, err := rp.PublishRun(ctx, msgs, out)
	done := time.Now().UnixNano()
	for i := range n {
		recordStage(msgs[i].ID, in, done)
	}
	return n, err
}

// recordStage keeps the times of the record whose message id ends in
// connbench's sequence number.
func recordStage(id string, in, out int64) {
	if len(id) < 12 {
		return
	}
	seq, err := strconv.ParseInt(id[len(id)-12:], 16, 64)
	if err != nil {
		return
	}
	if i := stageTrace.n.Add(1) - 1; i < stageTraceCap {
		stageTrace.entries[i] = stageEntry{seq, in, out}
	}
}

// stagePublisher times pub's publications when CONNBENCH_STAGE_TRACE is set.
func stagePublisher(pub outboxfeed.Publisher) outboxfeed.Publisher {
	if stageTrace.path == "" {
		return pub
	}
	return stagePub{pub}
}

// writeStageTrace writes the timings to CONNBENCH_STAGE_TRACE, once the
// Workers have stopped.
func writeStageTrace() {
	if stageTrace.path == "" {
		return
	}
	f, err := os.Create(stageTrace.path)
	if err != nil {
		return
	}
	w := bufio.NewWriter(f)
	var b [24]byte
	for _, e := range stageTrace.entries[:min(stageTrace.n.Load(), stageTraceCap)] {
		binary.LittleEndian.PutUint64(b[0:], uint64(e.seq))
		binary.LittleEndian.PutUint64(b[8:], uint64(e.in))
		binary.LittleEndian.PutUint64(b[16:], uint64(e.out))
		_, _ = w.Write(b[:])
	}
	_ = w.Flush()
	_ = f.Close()
}

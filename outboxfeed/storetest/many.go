package storetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/stage"
)

// manyChannels stages one record on each of n channels spread over the
// partitions (each channel's partition in parts) and returns their ids by
// partition, in staging order.
func manyChannels(t *testing.T, h *Harness, n int, round int) map[int][]string {
	t.Helper()
	var notes []stage.Notification
	var parts []int
	for i := range n {
		ch := fmt.Sprintf("many/%d", i)
		notes = append(notes, Note(ch, fmt.Sprintf(`{"round":%d}`, round)))
		parts = append(parts, h.PartitionOf(t, fanout.Key{Tenant: "acme", Channel: ch}))
	}
	ids := h.Stage(t, true, notes...)
	byPart := map[int][]string{}
	for i, id := range ids {
		byPart[parts[i]] = append(byPart[parts[i]], id)
	}
	return byPart
}

// batchesByPart checks that bs are one batch a partition, all of owner,
// and returns their ids by partition.
func batchesByPart(t *testing.T, bs []*outboxfeed.Batch, owner string) map[int][]string {
	t.Helper()
	got := map[int][]string{}
	for _, b := range bs {
		if _, dup := got[b.Partition]; dup {
			t.Fatalf("two batches of partition %d", b.Partition)
		}
		if b.Owner != owner || b.Takeover || len(b.Records) == 0 {
			t.Fatalf("batch of partition %d: owner %q, takeover %v, %d records; want a fresh batch of %s with records",
				b.Partition, b.Owner, b.Takeover, len(b.Records), owner)
		}
		got[b.Partition] = BatchIDs(b)
	}
	return got
}

// allDone is the completions of bs with every record done.
func allDone(bs []*outboxfeed.Batch, goOn bool) []outboxfeed.Completion {
	cs := make([]outboxfeed.Completion, len(bs))
	for i, b := range bs {
		cs[i] = outboxfeed.Completion{Batch: b, Out: make([]outboxfeed.Outcome, len(b.Records)), GoOn: goOn}
	}
	return cs
}

// CompleteMany serves every partition with records in one step: a claim
// with Spread leases each partition with records (one batch each, nobody
// else gets them meanwhile); completing them all with GoOn keeps the
// leases of the partitions that received records since and hands out
// exactly those records, and gives the others back, where a later claim
// takes them; a completion under a lease that is no longer the batch's
// changes nothing. Every record comes out once, in order.
func testCompleteMany(t *testing.T, h *Harness) {
	ctx := context.Background()
	const owner = "many"
	req := outboxfeed.ClaimRequest{Owner: owner, Partition: outboxfeed.AnyPartition, Limit: 100, Lease: time.Minute, Spread: 8}
	first := manyChannels(t, h, 16, 1)
	held, bs, err := h.Store.CompleteMany(ctx, nil, &req)
	if err != nil || len(held) != 0 {
		t.Fatalf("claim of many: held %v, err %v", held, err)
	}
	if got := batchesByPart(t, bs, owner); fmt.Sprint(got) != fmt.Sprint(first) {
		t.Fatalf("claimed %v, want every partition's records, a batch each: %v", got, first)
	}
	if b := ClaimAny(t, h.Store, "other", 100, time.Minute); b != nil {
		t.Fatalf("another owner claimed partition %d while every partition with records was held", b.Partition)
	}

	// Records come to one partition only: it goes on, the others are given
	// back.
	var busy int
	for p := range first {
		busy = p
		break
	}
	var more []string
	for i := 0; len(more) < 3; i++ {
		ch := fmt.Sprintf("many/%d", i)
		if h.PartitionOf(t, fanout.Key{Tenant: "acme", Channel: ch}) == busy {
			more = append(more, h.Stage(t, true, Note(ch, `{"round":2}`))...)
		}
	}
	held, nbs, err := h.Store.CompleteMany(ctx, allDone(bs, true), &req)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(held, false) || len(held) != len(bs) {
		t.Fatalf("held %v, want every lease held", held)
	}
	if got := batchesByPart(t, nbs, owner); fmt.Sprint(got) != fmt.Sprint(map[int][]string{busy: more}) {
		t.Fatalf("went on with %v, want partition %d's new records %v only", got, busy, more)
	}
	// A completion of a batch already completed (its lease gone) changes
	// nothing and says so.
	stale, _, err := h.Store.CompleteMany(ctx, allDone(bs[:1], false), nil)
	if err != nil || len(stale) != 1 || stale[0] {
		t.Fatalf("completion of a completed batch: held %v, err %v; want not held", stale, err)
	}

	// The partitions given back are free: another owner takes the next
	// records there while the busy one stays held.
	third := manyChannels(t, h, 16, 3)
	other := outboxfeed.ClaimRequest{Owner: "other", Partition: outboxfeed.AnyPartition, Limit: 100, Lease: time.Minute, Spread: 8}
	_, obs, err := h.Store.CompleteMany(ctx, nil, &other)
	if err != nil {
		t.Fatal(err)
	}
	wantOther := map[int][]string{}
	for p, ids := range third {
		if p != busy {
			wantOther[p] = ids
		}
	}
	if got := batchesByPart(t, obs, "other"); fmt.Sprint(got) != fmt.Sprint(wantOther) {
		t.Fatalf("the other owner claimed %v, want the free partitions' records %v", got, wantOther)
	}
	// Both complete; the held partition's third records come with its
	// completion, in order after the second ones.
	if _, _, err := h.Store.CompleteMany(ctx, allDone(obs, false), nil); err != nil {
		t.Fatal(err)
	}
	held, last, err := h.Store.CompleteMany(ctx, allDone(nbs, true), &req)
	if err != nil || slices.Contains(held, false) {
		t.Fatalf("held %v, err %v", held, err)
	}
	if got := batchesByPart(t, last, owner); fmt.Sprint(got) != fmt.Sprint(map[int][]string{busy: third[busy]}) {
		t.Fatalf("went on with %v, want partition %d's third records %v", got, busy, third[busy])
	}
	if _, _, err := h.Store.CompleteMany(ctx, allDone(last, false), nil); err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, round := range []map[int][]string{first, third} {
		for _, ids := range round {
			all = append(all, ids...)
		}
	}
	for _, id := range append(all, more...) {
		if _, ok := StateOf(t, h.Store, id).(outboxfeed.Dispatched); !ok {
			t.Fatalf("%s: %#v, want dispatched", id, StateOf(t, h.Store, id))
		}
	}
	if b := ClaimAny(t, h.Store, "after", 100, time.Minute); b != nil {
		t.Fatalf("a claim after everything was completed found %v", BatchIDs(b))
	}
}

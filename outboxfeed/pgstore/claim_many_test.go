package pgstore

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/stage"
	"github.com/heraldgw/herald/outboxfeed/storetest"
)

// A claim of several partitions leases a partition in the common state
// and reads its range in the same statement (pgClaimManySQL): the
// records of a transaction that was open when the partition's range
// began (in the xip of its lo) and committed since come in that claim,
// and so do those of the transactions that began later.
func TestPostgresClaimManyReadsTransactionsOpenAtTheRangesStart(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	notes := func(tag string) []stage.Notification {
		var ns []stage.Notification
		for i := range 12 {
			ns = append(ns, storetest.Note(fmt.Sprintf("c/%d", i), fmt.Sprintf(`{%q:%d}`, tag, i)))
		}
		return ns
	}
	req := outboxfeed.ClaimRequest{Owner: "claim-many-test", Partition: outboxfeed.AnyPartition, Limit: 100,
		Lease: time.Minute, Spread: 64}
	claimAll := func(what string) []string {
		t.Helper()
		_, bs, err := s.CompleteMany(ctx, nil, &req)
		testenv.Must(t, err, "claim "+what)
		var cs []outboxfeed.Completion
		var got []string
		for _, b := range bs {
			if b.More {
				t.Fatalf("claim %s: partition %d holds more than a batch", what, b.Partition)
			}
			out := make([]outboxfeed.Outcome, len(b.Records))
			for _, r := range b.Records {
				got = append(got, r.ID)
			}
			cs = append(cs, outboxfeed.Completion{Batch: b, Out: out})
		}
		held, _, err := s.CompleteMany(ctx, cs, nil)
		testenv.Must(t, err, "complete "+what)
		for i, h := range held {
			if !h {
				t.Fatalf("complete %s: lost the lease of partition %d", what, cs[i].Batch.Partition)
			}
		}
		slices.Sort(got)
		return got
	}
	open, openIDs := openStage(t, s, notes("open")...)
	before := pgStage(t, s, notes("before")...)
	slices.Sort(before)
	// Each partition's range now ends at a snapshot in which open runs.
	if got := claimAll("the records before"); !slices.Equal(got, before) {
		t.Fatalf("first claim read %v, want %v", got, before)
	}
	testenv.Must(t, open.Commit(ctx), "commit the open transaction")
	// One partition's range starts after it, and that partition comes
	// first in the next claim: the claim reads each partition's range from
	// its own start.
	_, err := s.Pool().Exec(ctx, `UPDATE herald.outbox_partition SET lo = pg_current_snapshot(), claimed_at = '2000-01-01'
		WHERE part = (SELECT min(part) FROM herald.outbox_partition)`)
	testenv.Must(t, err, "move the first partition's start past the open transaction")
	var skipped []string
	testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT coalesce(array_agg(id::text), '{}') FROM herald.outbox
		WHERE part = (SELECT min(part) FROM herald.outbox_partition)`).Scan(&skipped), "records before the moved start")
	after := pgStage(t, s, notes("after")...)
	want := slices.Concat(openIDs, after)
	want = slices.DeleteFunc(want, func(id string) bool { return slices.Contains(skipped, id) && !slices.Contains(after, id) })
	slices.Sort(want)
	if got := claimAll("the records of the transaction open at the range's start"); !slices.Equal(got, want) {
		t.Fatalf("second claim read %d records %v, want %d %v", len(got), got, len(want), want)
	}
	var held int
	testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT count(*) FROM herald.outbox_partition WHERE owner IS NOT NULL`).Scan(&held), "leases")
	if held != 0 {
		t.Fatalf("%d partitions still leased after every batch completed", held)
	}
}

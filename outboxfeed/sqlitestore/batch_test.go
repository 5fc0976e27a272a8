package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/internal/storekit"
	"github.com/heraldgw/herald/outboxfeed/stage"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/internal/testenv"
)

// The SQLite store's batch claim and completion, driven directly (no
// Worker). Helpers are prefixed sb (SQLite batch).

const sbLease = time.Minute

func sbStore(t *testing.T) *Store {
	t.Helper()
	s := sbOpen(t)
	testenv.Must(t, s.Migrate(context.Background()), "migrate")
	return s
}

func sbOpen(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), Config{Path: filepath.Join(t.TempDir(), "herald.db")})
	testenv.Must(t, err, "open sqlite store")
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func sbNote(channel, payload string) stage.Notification {
	return stage.Notification{TenantID: "acme", Channel: channel, Type: "order.updated", SchemaVersion: 1, Payload: json.RawMessage(payload)}
}

func sbStage(t *testing.T, s *Store, ns ...stage.Notification) []string {
	t.Helper()
	ids := make([]string, len(ns))
	for i, n := range ns {
		var err error
		ids[i], err = stageOne(context.Background(), s, n)
		testenv.Must(t, err, "stage")
	}
	return ids
}

func sbReq(owner string, limit int) outboxfeed.ClaimRequest {
	return outboxfeed.ClaimRequest{Owner: owner, Partition: outboxfeed.AnyPartition, Limit: limit, Lease: sbLease}
}

func sbClaim(t *testing.T, s *Store, owner string, limit int) *outboxfeed.Batch {
	t.Helper()
	b, err := s.Claim(context.Background(), sbReq(owner, limit))
	testenv.Must(t, err, "claim")
	return b
}

func sbMustClaim(t *testing.T, s *Store, owner string, limit int) *outboxfeed.Batch {
	t.Helper()
	b := sbClaim(t, s, owner, limit)
	if b == nil {
		t.Fatalf("claim for %s: nil batch, want records", owner)
	}
	return b
}

func sbComplete(t *testing.T, s *Store, b *outboxfeed.Batch, out []outboxfeed.Outcome, next *outboxfeed.ClaimRequest) (bool, *outboxfeed.Batch) {
	t.Helper()
	held, nb, err := s.Complete(context.Background(), b, out, next)
	testenv.Must(t, err, "complete")
	return held, nb
}

// sbAll is the same outcome for every record of b.
func sbAll(b *outboxfeed.Batch, k outboxfeed.OutcomeKind) []outboxfeed.Outcome {
	out := make([]outboxfeed.Outcome, len(b.Records))
	for i := range out {
		out[i].Kind = k
	}
	return out
}

func sbIDs(b *outboxfeed.Batch) []string {
	if b == nil {
		return nil
	}
	out := make([]string, len(b.Records))
	for i, r := range b.Records {
		out[i] = r.ID
	}
	return out
}

func sbWantIDs(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

func sbGet(t *testing.T, s *Store, id string) outboxfeed.Record {
	t.Helper()
	r, err := s.Get(context.Background(), id)
	testenv.Must(t, err, "get "+id)
	return r
}

func sbExec(t *testing.T, s *Store, q string, args ...any) {
	t.Helper()
	_, err := s.DB().ExecContext(context.Background(), q, args...)
	testenv.Must(t, err, q)
}

// sbExpireLease makes the partition's lease run out (as if its holder had
// stalled for the whole lease).
func sbExpireLease(t *testing.T, s *Store) {
	t.Helper()
	sbExec(t, s, `UPDATE outbox_partition SET expires_at = 1 WHERE owner IS NOT NULL`)
}

// sbMakeDue makes the queue rows of ids due now (their retry delay passed).
func sbMakeDue(t *testing.T, s *Store, ids ...string) {
	t.Helper()
	sbExec(t, s, `UPDATE outbox_retry SET next_attempt_at = 0 WHERE id IN (SELECT value FROM json_each(?))`, storekit.JSONStrings(ids))
}

func sbPartition(t *testing.T, s *Store) (owner sql.NullString, fence, pos int64, claimTo sql.NullInt64) {
	t.Helper()
	err := s.DB().QueryRowContext(context.Background(), `SELECT owner, fence, pos, claim_to FROM outbox_partition WHERE part = 0`).
		Scan(&owner, &fence, &pos, &claimTo)
	testenv.Must(t, err, "read partition")
	return owner, fence, pos, claimTo
}

func sbCount(t *testing.T, s *Store, q string, args ...any) int64 {
	t.Helper()
	var n int64
	testenv.Must(t, s.DB().QueryRowContext(context.Background(), q, args...).Scan(&n), q)
	return n
}

func sbWantState[S outboxfeed.State](t *testing.T, s *Store, id string) S {
	t.Helper()
	st, ok := sbGet(t, s, id).State.(S)
	if !ok {
		t.Fatalf("record %s: state %#v, want %T", id, sbGet(t, s, id).State, st)
	}
	return st
}

func TestSQLiteBatchClaimComplete(t *testing.T) {
	t.Parallel()
	s := sbStore(t)
	ctx := context.Background()
	if b := sbClaim(t, s, "w1", 10); b != nil {
		t.Fatalf("claim of an empty outbox: %+v, want nil", b)
	}
	if owner, _, _, _ := sbPartition(t, s); owner.Valid {
		t.Fatalf("empty claim left the lease with %q", owner.String)
	}
	ids := sbStage(t, s, sbNote("a", `{"n":1}`), sbNote("b", `{"n":2}`), sbNote("a", `{"n":3}`))
	before := time.Now()
	b := sbMustClaim(t, s, "w1", 10)
	sbWantIDs(t, "batch", sbIDs(b), ids)
	if b.Partition != 0 || b.Owner != "w1" || b.Fence != 1 || b.Takeover || b.Takeovers != 0 || b.More || b.Blocked != nil {
		t.Fatalf("batch = %+v", b)
	}
	for _, r := range b.Records {
		p, ok := r.State.(outboxfeed.Processing)
		if !ok || p.LeaseOwner != "w1" || p.Fence != 1 || r.Fence != 1 || r.Queued != 0 {
			t.Fatalf("claimed record %s: %+v", r.ID, r)
		}
		if p.LeaseExpiresAt.Before(before.Add(sbLease - time.Second)) {
			t.Fatalf("lease expires at %v, want about %v", p.LeaseExpiresAt, before.Add(sbLease))
		}
	}
	if !sbJSONEqual(t, b.Records[2].Payload, `{"n":3}`) || b.Records[1].Channel != "b" {
		t.Fatalf("record content: %+v", b.Records[1:])
	}
	// While claimed: Processing through Get, and nobody else gets it.
	if p := sbWantState[outboxfeed.Processing](t, s, ids[0]); p.LeaseOwner != "w1" || p.Fence != 1 {
		t.Fatalf("derived processing state %+v", p)
	}
	if other := sbClaim(t, s, "w2", 10); other != nil {
		t.Fatalf("a held partition was claimed by w2: %+v", other)
	}
	st, err := s.Stats(ctx)
	testenv.Must(t, err, "stats")
	if st.Pending != 3 || st.DeadLetter != 0 {
		t.Fatalf("stats while claimed: %+v", st)
	}

	held, nb := sbComplete(t, s, b, sbAll(b, outboxfeed.OutcomeDone), nil)
	if !held || nb != nil {
		t.Fatalf("complete = %v, %+v; want held, no next batch", held, nb)
	}
	for _, id := range ids {
		d := sbWantState[outboxfeed.Dispatched](t, s, id)
		if d.At.Before(before.Add(-time.Second)) || d.At.After(time.Now().Add(time.Second)) || d.Attempt != 0 {
			t.Fatalf("dispatched state %+v", d)
		}
	}
	owner, fence, pos, claimTo := sbPartition(t, s)
	if owner.Valid || fence != 1 || pos != b.Records[2].Seq || claimTo.Valid {
		t.Fatalf("partition after completion: owner %v fence %d pos %d claim_to %v", owner, fence, pos, claimTo)
	}
	if n := sbCount(t, s, `SELECT count(*) FROM outbox_retry`); n != 0 {
		t.Fatalf("a batch all done wrote %d queue rows", n)
	}
	if n := sbCount(t, s, `SELECT count(*) FROM outbox_batch WHERE from_seq = ? AND to_seq = ? AND fence = 1`, b.Records[0].Seq, pos); n != 1 {
		t.Fatalf("completed batch not logged")
	}
	if b := sbClaim(t, s, "w1", 10); b != nil {
		t.Fatalf("claim after completion: %v, want nil", sbIDs(b))
	}
	st, err = s.Stats(ctx)
	testenv.Must(t, err, "stats")
	if st.Pending != 0 || !st.OldestPending.IsZero() {
		t.Fatalf("stats after completion: %+v", st)
	}
}

func sbJSONEqual(t *testing.T, got json.RawMessage, want string) bool {
	t.Helper()
	var g, w any
	testenv.Must(t, json.Unmarshal(got, &g), "payload")
	testenv.Must(t, json.Unmarshal([]byte(want), &w), "want")
	return reflect.DeepEqual(g, w)
}

func TestSQLiteBatchMoreAndNext(t *testing.T) {
	t.Parallel()
	s := sbStore(t)
	ids := sbStage(t, s, sbNote("a", `1`), sbNote("a", `2`), sbNote("b", `3`), sbNote("a", `4`), sbNote("c", `5`))
	b := sbMustClaim(t, s, "w1", 2)
	sbWantIDs(t, "first batch", sbIDs(b), ids[:2])
	if !b.More {
		t.Fatal("More = false with three records left")
	}
	next := sbReq("w1", 2)
	held, b2 := sbComplete(t, s, b, sbAll(b, outboxfeed.OutcomeDone), &next)
	if !held || b2 == nil {
		t.Fatalf("complete with next: held %v, batch %v", held, b2)
	}
	sbWantIDs(t, "second batch", sbIDs(b2), ids[2:4])
	if b2.Fence != 2 || b2.Takeover || b2.Takeovers != 0 || !b2.More {
		t.Fatalf("second batch %+v", b2)
	}
	// Handing over to another owner in the same step.
	other := sbReq("w2", 2)
	held, b3 := sbComplete(t, s, b2, sbAll(b2, outboxfeed.OutcomeDone), &other)
	if !held || b3 == nil || b3.Owner != "w2" || b3.Fence != 3 || b3.More {
		t.Fatalf("third batch: held %v, %+v", held, b3)
	}
	sbWantIDs(t, "third batch", sbIDs(b3), ids[4:])
	if p := sbWantState[outboxfeed.Processing](t, s, ids[4]); p.LeaseOwner != "w2" {
		t.Fatalf("third batch's record: %+v", p)
	}
	// Nothing left: the next claim of the completion is empty and the lease
	// is given back.
	again := sbReq("w2", 2)
	held, b4 := sbComplete(t, s, b3, sbAll(b3, outboxfeed.OutcomeDone), &again)
	if !held || b4 != nil {
		t.Fatalf("final completion: held %v, next %v", held, sbIDs(b4))
	}
	if owner, _, _, claimTo := sbPartition(t, s); owner.Valid || claimTo.Valid {
		t.Fatalf("lease kept after an empty next claim: %v %v", owner, claimTo)
	}
	for _, id := range ids {
		sbWantState[outboxfeed.Dispatched](t, s, id)
	}
}

func TestSQLiteBatchLeaseLost(t *testing.T) {
	t.Parallel()
	s := sbStore(t)
	ids := sbStage(t, s, sbNote("a", `1`), sbNote("a", `2`))
	b := sbMustClaim(t, s, "w1", 10)

	// A wrong fence changes nothing.
	stale := *b
	stale.Fence--
	if held, nb := sbComplete(t, s, &stale, sbAll(b, outboxfeed.OutcomeRetryLater), nil); held || nb != nil {
		t.Fatalf("complete under a wrong fence: held %v, %v", held, nb)
	}
	// Nor does a wrong owner.
	wrong := *b
	wrong.Owner = "w9"
	if held, _ := sbComplete(t, s, &wrong, sbAll(b, outboxfeed.OutcomeDone), nil); held {
		t.Fatal("complete under a wrong owner held")
	}
	sbWantState[outboxfeed.Processing](t, s, ids[0])

	// The lease runs out: w2 takes the partition over.
	sbExpireLease(t, s)
	sbWantState[outboxfeed.Pending](t, s, ids[0]) // an expired claim is pending again
	b2 := sbMustClaim(t, s, "w2", 10)
	sbWantIDs(t, "takeover batch", sbIDs(b2), ids)
	if !b2.Takeover || b2.Takeovers != 1 || b2.Fence != 2 {
		t.Fatalf("takeover batch %+v", b2)
	}
	// w1 wakes up and completes: nothing changes.
	next := sbReq("w1", 10)
	if held, nb := sbComplete(t, s, b, []outboxfeed.Outcome{{Kind: outboxfeed.OutcomeDeadLettered, Err: "late"}, {Kind: outboxfeed.OutcomeRetryLater, Err: "late"}}, &next); held || nb != nil {
		t.Fatalf("the old holder's completion: held %v, %v", held, nb)
	}
	owner, fence, pos, claimTo := sbPartition(t, s)
	if owner.String != "w2" || fence != 2 || pos != 0 || !claimTo.Valid {
		t.Fatalf("partition after a lost completion: %v %d %d %v", owner, fence, pos, claimTo)
	}
	if n := sbCount(t, s, `SELECT count(*) FROM outbox_retry`); n != 0 {
		t.Fatalf("a lost completion wrote %d queue rows", n)
	}
	if p := sbWantState[outboxfeed.Processing](t, s, ids[1]); p.LeaseOwner != "w2" || p.Fence != 2 {
		t.Fatalf("after the lost completion: %+v", p)
	}
	if held, _ := sbComplete(t, s, b2, sbAll(b2, outboxfeed.OutcomeDone), nil); !held {
		t.Fatal("the new holder lost its lease")
	}
	sbWantState[outboxfeed.Dispatched](t, s, ids[1])
}

// TestSQLiteBatchCompletePrefix completes the first records of a batch
// only (as the Worker does after takeovers): the rest is read again, the
// queue rows past the prefix untouched.
func TestSQLiteBatchCompletePrefix(t *testing.T) {
	t.Parallel()
	s := sbStore(t)
	ids := sbStage(t, s, sbNote("a", `1`), sbNote("b", `2`), sbNote("c", `3`), sbNote("d", `4`))
	b := sbMustClaim(t, s, "w1", 2)
	sbComplete(t, s, b, sbAll(b, outboxfeed.OutcomeHold), nil) // ids[0], ids[1] into the queue
	b = sbMustClaim(t, s, "w1", 10)
	sbWantIDs(t, "queue then range", sbIDs(b), ids)
	// Only the first queue row.
	if held, _ := sbComplete(t, s, b, []outboxfeed.Outcome{{Kind: outboxfeed.OutcomeDone}}, nil); !held {
		t.Fatal("lease lost")
	}
	sbWantState[outboxfeed.Dispatched](t, s, ids[0])
	if _, _, pos, claimTo := sbPartition(t, s); pos != 2 || claimTo.Valid {
		t.Fatalf("a prefix of queue rows moved the position to %d (claim_to %v)", pos, claimTo)
	}
	b = sbMustClaim(t, s, "w1", 10)
	if b.Takeover {
		t.Fatal("a claim after a prefix completion is a takeover")
	}
	sbWantIDs(t, "after the queue prefix", sbIDs(b), ids[1:])
	// The queue row and the first record from the position.
	if held, _ := sbComplete(t, s, b, []outboxfeed.Outcome{{Kind: outboxfeed.OutcomeDone}, {Kind: outboxfeed.OutcomeRetryLater, Delay: time.Hour, Err: "x"}}, nil); !held {
		t.Fatal("lease lost")
	}
	if _, _, pos, _ := sbPartition(t, s); pos != 3 {
		t.Fatalf("position %d after a prefix ending at seq 3", pos)
	}
	sbWantState[outboxfeed.Pending](t, s, ids[2])
	sbWantState[outboxfeed.Pending](t, s, ids[3])
	b = sbMustClaim(t, s, "w1", 10)
	sbWantIDs(t, "after the range prefix", sbIDs(b), ids[3:])
	if b.Blocked == nil {
		t.Fatal("c's retry does not block c")
	}
}

func TestSQLiteBatchTakeovers(t *testing.T) {
	t.Parallel()
	s := sbStore(t)
	ids := sbStage(t, s, sbNote("a", `1`))
	b := sbMustClaim(t, s, "w1", 10)
	if b.Takeover {
		t.Fatal("first claim is a takeover")
	}
	for i, owner := range []string{"w2", "w3"} {
		sbExpireLease(t, s)
		b = sbMustClaim(t, s, owner, 10)
		if !b.Takeover || b.Takeovers != i+1 || b.Fence != int64(i+2) {
			t.Fatalf("claim %d by %s: %+v", i+2, owner, b)
		}
	}
	// Claiming again under the same owner, lease not expired, is a
	// takeover too (a restarted Worker with the same name): the old batch
	// is fenced off.
	old := b
	b = sbMustClaim(t, s, "w3", 10)
	if !b.Takeover || b.Takeovers != 3 || b.Fence != old.Fence+1 {
		t.Fatalf("own re-claim %+v", b)
	}
	if held, _ := sbComplete(t, s, old, sbAll(old, outboxfeed.OutcomeDone), nil); held {
		t.Fatal("the fenced-off batch completed")
	}
	if held, _ := sbComplete(t, s, b, sbAll(b, outboxfeed.OutcomeDone), nil); !held {
		t.Fatal("completion lost")
	}
	sbWantState[outboxfeed.Dispatched](t, s, ids[0])
	// A completion resets the count.
	sbStage(t, s, sbNote("a", `2`))
	b = sbMustClaim(t, s, "w1", 10)
	if b.Takeover || b.Takeovers != 0 {
		t.Fatalf("claim after a completion: %+v", b)
	}
}

func TestSQLiteBatchRetryQueueOrderAndBlocked(t *testing.T) {
	t.Parallel()
	s := sbStore(t)
	ids := sbStage(t, s, sbNote("a", `1`), sbNote("a", `2`), sbNote("b", `3`))
	a1, a2, b1 := ids[0], ids[1], ids[2]
	b := sbMustClaim(t, s, "w1", 10)
	start := time.Now()
	held, _ := sbComplete(t, s, b, []outboxfeed.Outcome{
		{Kind: outboxfeed.OutcomeRetryLater, Delay: time.Hour, Err: "broker said no"},
		{Kind: outboxfeed.OutcomeHold},
		{Kind: outboxfeed.OutcomeDone},
	}, nil)
	if !held {
		t.Fatal("lease lost")
	}
	p := sbWantState[outboxfeed.Pending](t, s, a1)
	if p.Attempt != 1 || p.LastError != "broker said no" || p.NextAttemptAt.Before(start.Add(time.Hour-time.Second)) {
		t.Fatalf("retried record %+v", p)
	}
	if p := sbWantState[outboxfeed.Pending](t, s, a2); p.Attempt != 0 || p.LastError != "" {
		t.Fatalf("held record %+v", p)
	}
	sbWantState[outboxfeed.Dispatched](t, s, b1)
	st, err := s.Stats(context.Background())
	testenv.Must(t, err, "stats")
	if st.Pending != 2 {
		t.Fatalf("stats pending %d, want the 2 queue rows", st.Pending)
	}

	// New records: channel a is blocked behind its retry, b is not.
	more := sbStage(t, s, sbNote("a", `4`), sbNote("b", `5`))
	a3, b2 := more[0], more[1]
	b = sbMustClaim(t, s, "w1", 10)
	sbWantIDs(t, "batch while a waits", sbIDs(b), more)
	if _, ok := b.Blocked[fanout.Key{Tenant: "acme", Channel: "a"}]; !ok || len(b.Blocked) != 1 {
		t.Fatalf("Blocked = %v, want channel a", b.Blocked)
	}
	if b.More {
		t.Fatal("More with a retry not due")
	}
	held, _ = sbComplete(t, s, b, []outboxfeed.Outcome{{Kind: outboxfeed.OutcomeHold}, {Kind: outboxfeed.OutcomeDone}}, nil)
	if !held {
		t.Fatal("lease lost")
	}
	sbWantState[outboxfeed.Dispatched](t, s, b2)
	if b := sbClaim(t, s, "w1", 10); b != nil {
		t.Fatalf("claim with only a retry not due: %v", sbIDs(b))
	}

	// The retry is due: channel a's queue comes back in order, first.
	sbMakeDue(t, s, a1)
	fresh := sbStage(t, s, sbNote("c", `6`))
	b = sbMustClaim(t, s, "w1", 10)
	sbWantIDs(t, "batch after the retry is due", sbIDs(b), []string{a1, a2, a3, fresh[0]})
	if b.Blocked != nil {
		t.Fatalf("Blocked = %v, want none", b.Blocked)
	}
	for i, r := range b.Records[:3] {
		if r.Queued == 0 {
			t.Fatalf("record %d of the queue has no queue row", i)
		}
		if pr := r.State.(outboxfeed.Processing); pr.Attempt != r.Attempt {
			t.Fatalf("processing attempt %d, record attempt %d", pr.Attempt, r.Attempt)
		}
	}
	if b.Records[0].Attempt != 1 || b.Records[1].Attempt != 0 || b.Records[3].Queued != 0 {
		t.Fatalf("attempts: %+v", b.Records)
	}
	held, _ = sbComplete(t, s, b, []outboxfeed.Outcome{
		{Kind: outboxfeed.OutcomeDone}, {Kind: outboxfeed.OutcomeDone}, {Kind: outboxfeed.OutcomeRetryLater, Delay: time.Hour, Err: "again"}, {Kind: outboxfeed.OutcomeDone},
	}, nil)
	if !held {
		t.Fatal("lease lost")
	}
	if d := sbWantState[outboxfeed.Dispatched](t, s, a1); d.Attempt != 1 {
		t.Fatalf("dispatched after a retry: %+v", d)
	}
	sbWantState[outboxfeed.Dispatched](t, s, a2)
	if p := sbWantState[outboxfeed.Pending](t, s, a3); p.Attempt != 1 || p.LastError != "again" {
		t.Fatalf("retried queue row %+v", p)
	}
	// A second failure of a queue row counts on.
	sbMakeDue(t, s, a3)
	b = sbMustClaim(t, s, "w1", 10)
	sbWantIDs(t, "a3 again", sbIDs(b), []string{a3})
	sbComplete(t, s, b, []outboxfeed.Outcome{{Kind: outboxfeed.OutcomeRetryLater, Delay: 0, Err: "third"}}, nil)
	if p := sbWantState[outboxfeed.Pending](t, s, a3); p.Attempt != 2 || p.LastError != "third" {
		t.Fatalf("twice retried %+v", p)
	}
}

func TestSQLiteBatchQueueBoundedByLimit(t *testing.T) {
	t.Parallel()
	s := sbStore(t)
	ids := sbStage(t, s, sbNote("a", `1`), sbNote("a", `2`), sbNote("a", `3`), sbNote("b", `4`))
	b := sbMustClaim(t, s, "w1", 10)
	sbComplete(t, s, b, sbAll(b, outboxfeed.OutcomeHold), nil) // the broker was down
	tail := sbStage(t, s, sbNote("c", `5`), sbNote("c", `6`), sbNote("c", `7`))

	b = sbMustClaim(t, s, "w1", 2)
	// Two queue rows, shared fairly: the head of a and b's one; then two
	// records from the position.
	sbWantIDs(t, "bounded batch", sbIDs(b), []string{ids[0], ids[3], tail[0], tail[1]})
	if _, ok := b.Blocked[fanout.Key{Tenant: "acme", Channel: "a"}]; !ok || len(b.Blocked) != 1 || !b.More {
		t.Fatalf("Blocked %v More %v, want only a blocked (rows left) and more", b.Blocked, b.More)
	}
	sbComplete(t, s, b, sbAll(b, outboxfeed.OutcomeDone), nil)
	b = sbMustClaim(t, s, "w1", 2)
	sbWantIDs(t, "rest", sbIDs(b), []string{ids[1], ids[2], tail[2]})
	if b.Blocked != nil || b.More {
		t.Fatalf("rest: Blocked %v More %v", b.Blocked, b.More)
	}
}

func TestSQLiteBatchDeadLetterAndReplay(t *testing.T) {
	t.Parallel()
	s := sbStore(t)
	ctx := context.Background()
	a := s.Admin()
	ids := sbStage(t, s, sbNote("a", `1`), sbNote("b", `2`))
	b := sbMustClaim(t, s, "w1", 10)
	sbComplete(t, s, b, []outboxfeed.Outcome{{Kind: outboxfeed.OutcomeDeadLettered, Err: "no reader for order.updated v1"}, {Kind: outboxfeed.OutcomeRetryLater, Err: "flaky"}}, nil)
	d := sbWantState[outboxfeed.DeadLetter](t, s, ids[0])
	if d.Reason != "no reader for order.updated v1" || d.Attempts != 1 || d.At.IsZero() {
		t.Fatalf("dead letter %+v", d)
	}
	// A queue row dead-lettered counts its earlier attempts.
	sbMakeDue(t, s, ids[1])
	b = sbMustClaim(t, s, "w1", 10)
	sbWantIDs(t, "retry", sbIDs(b), ids[1:])
	sbComplete(t, s, b, []outboxfeed.Outcome{{Kind: outboxfeed.OutcomeDeadLettered, Err: "gave up"}}, nil)
	if d := sbWantState[outboxfeed.DeadLetter](t, s, ids[1]); d.Attempts != 2 || d.Reason != "gave up" {
		t.Fatalf("dead-lettered retry %+v", d)
	}
	st, err := s.Stats(ctx)
	testenv.Must(t, err, "stats")
	if st.DeadLetter != 2 || st.Pending != 0 {
		t.Fatalf("stats %+v", st)
	}
	as, err := a.Stats(ctx)
	testenv.Must(t, err, "admin stats")
	if as.States[outboxfeed.StateDeadLetter] != 2 || !reflect.DeepEqual(as.DeadLetters, []outboxfeed.TypeCount{{Type: "order.updated", SchemaVersion: 1, Count: 2}}) {
		t.Fatalf("admin stats %+v", as)
	}
	if b := sbClaim(t, s, "w1", 10); b != nil {
		t.Fatalf("dead letters were claimed: %v", sbIDs(b))
	}

	wctx, stop := context.WithCancel(ctx)
	wake := s.Wakeups(wctx)
	defer func() {
		stop()
		for range wake { // closed once its goroutine is done
		}
	}()
	<-wake // the first signal: drain the backlog
	res, err := a.Replay(ctx, outboxfeed.ReplayRequest{IDs: []string{ids[0], ids[0]}, Actor: "ops", Reason: "reader deployed"})
	testenv.Must(t, err, "replay")
	sbWantIDs(t, "replayed", res.Replayed, ids[:1])
	select {
	case <-wake:
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up after the replay")
	}
	if p := sbWantState[outboxfeed.Pending](t, s, ids[0]); p.Attempt != 0 || p.LastError != "" {
		t.Fatalf("replayed %+v", p)
	}
	audit, err := a.Replays(ctx, ids[0])
	testenv.Must(t, err, "replays")
	if len(audit) != 1 || audit[0].Actor != "ops" || audit[0].Failure != "no reader for order.updated v1" {
		t.Fatalf("audit %+v", audit)
	}
	b = sbMustClaim(t, s, "w1", 10)
	sbWantIDs(t, "replayed batch", sbIDs(b), ids[:1])
	sbComplete(t, s, b, sbAll(b, outboxfeed.OutcomeDone), nil)
	sbWantState[outboxfeed.Dispatched](t, s, ids[0])
	res, err = a.Replay(ctx, outboxfeed.ReplayRequest{IDs: ids, Actor: "ops", Reason: "again"})
	testenv.Must(t, err, "replay again")
	if len(res.Replayed) != 1 || res.Replayed[0] != ids[1] || len(res.Skipped) != 1 || res.Skipped[0].State != outboxfeed.StateDispatched {
		t.Fatalf("second replay %+v", res)
	}
}

func TestSQLiteBatchDerivedStatesInAdmin(t *testing.T) {
	t.Parallel()
	s := sbStore(t)
	ctx := context.Background()
	a := s.Admin()
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	var ns []stage.Notification
	for i := range 5 {
		n := sbNote(string(rune('a'+i)), `{}`)
		n.OccurredAt = t0.Add(time.Duration(i) * time.Minute)
		ns = append(ns, n)
	}
	ns[1].Kind = stage.KindIntegrationEvent
	ids := sbStage(t, s, ns...)
	b := sbMustClaim(t, s, "w1", 3)
	sbComplete(t, s, b, []outboxfeed.Outcome{{Kind: outboxfeed.OutcomeDone}, {Kind: outboxfeed.OutcomeDeadLettered, Err: "bad"}, {Kind: outboxfeed.OutcomeRetryLater, Delay: time.Hour, Err: "later"}}, nil)
	b = sbMustClaim(t, s, "w2", 3) // ids[3], ids[4] in processing
	sbWantIDs(t, "second batch", sbIDs(b), ids[3:])

	want := map[string][]string{
		outboxfeed.StateDispatched: {ids[0]},
		outboxfeed.StateDeadLetter: {ids[1]},
		outboxfeed.StatePending:    {ids[2]},
		outboxfeed.StateProcessing: {ids[3], ids[4]},
	}
	for state, w := range want {
		p, err := a.List(ctx, outboxfeed.Filter{State: state})
		testenv.Must(t, err, "list "+state)
		var got []string
		for _, r := range p.Records {
			if r.State.Name() != state {
				t.Fatalf("list %s returned a record in %s", state, r.State.Name())
			}
			got = append(got, r.ID)
		}
		sbWantIDs(t, "list "+state, got, w)
	}
	p, err := a.List(ctx, outboxfeed.Filter{Limit: 2, Channel: "d"})
	testenv.Must(t, err, "list by channel")
	if len(p.Records) != 1 || p.Records[0].ID != ids[3] || p.Records[0].State.(outboxfeed.Processing).LeaseOwner != "w2" {
		t.Fatalf("list by channel %+v", p)
	}
	p, err = a.List(ctx, outboxfeed.Filter{Limit: 2})
	testenv.Must(t, err, "list page 1")
	p2, err := a.List(ctx, outboxfeed.Filter{Limit: 2, After: p.Next})
	testenv.Must(t, err, "list page 2")
	if len(p.Records) != 2 || p.Next != p.Records[1].Seq || len(p2.Records) != 2 || p2.Records[0].ID != ids[2] {
		t.Fatalf("pages %+v / %+v", p, p2)
	}

	as, err := a.Stats(ctx)
	testenv.Must(t, err, "admin stats")
	if !reflect.DeepEqual(as.States, map[string]int64{outboxfeed.StatePending: 1, outboxfeed.StateProcessing: 2, outboxfeed.StateDispatched: 1, outboxfeed.StateDeadLetter: 1}) {
		t.Fatalf("admin states %v", as.States)
	}
	if !reflect.DeepEqual(as.Kinds, map[string]int64{stage.KindNotification: 4, stage.KindIntegrationEvent: 1}) {
		t.Fatalf("admin kinds %v", as.Kinds)
	}
	// The oldest record waiting is the retry (occurred at t0+2m), older
	// than the first record past the position (t0+3m).
	if !as.OldestPending.Equal(t0.Add(2 * time.Minute)) {
		t.Fatalf("oldest pending %v", as.OldestPending)
	}
	st, err := s.Stats(ctx)
	testenv.Must(t, err, "stats")
	if st.Pending != 3 || st.DeadLetter != 1 || !st.OldestPending.Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("stats %+v", st)
	}

	// The lease runs out: processing records are pending again.
	sbExpireLease(t, s)
	as, err = a.Stats(ctx)
	testenv.Must(t, err, "admin stats")
	if as.States[outboxfeed.StatePending] != 3 || as.States[outboxfeed.StateProcessing] != 0 {
		t.Fatalf("states after expiry %v", as.States)
	}
}

func TestSQLiteBatchPurge(t *testing.T) {
	t.Parallel()
	s := sbStore(t)
	ctx := context.Background()
	a := s.Admin()
	ids := sbStage(t, s, sbNote("a", `1`), sbNote("b", `2`), sbNote("c", `3`), sbNote("d", `4`), sbNote("e", `5`))
	b := sbMustClaim(t, s, "w1", 4)
	sbComplete(t, s, b, []outboxfeed.Outcome{{Kind: outboxfeed.OutcomeDone}, {Kind: outboxfeed.OutcomeRetryLater, Err: "x"}, {Kind: outboxfeed.OutcomeDeadLettered, Err: "y"}, {Kind: outboxfeed.OutcomeRetryLater, Delay: time.Hour, Err: "z"}}, nil)
	sbMakeDue(t, s, ids[1])
	b = sbMustClaim(t, s, "w1", 4) // ids[1] from the queue, ids[4] from the position
	sbWantIDs(t, "second batch", sbIDs(b), []string{ids[1], ids[4]})
	sbComplete(t, s, b, sbAll(b, outboxfeed.OutcomeDone), nil)
	// dispatched: 0 (position), 1 (queue), 4 (position); dead: 2; pending: 3.

	res, err := a.Purge(ctx, outboxfeed.PurgeRequest{State: outboxfeed.StateDispatched, OlderThan: time.Hour})
	testenv.Must(t, err, "purge recent")
	if res.Deleted != 0 {
		t.Fatalf("purged %d records younger than the cutoff", res.Deleted)
	}
	res, err = a.Purge(ctx, outboxfeed.PurgeRequest{State: outboxfeed.StateDispatched, DryRun: true})
	testenv.Must(t, err, "dry run")
	if res.Deleted != 3 || res.Batches != 0 {
		t.Fatalf("dry run %+v", res)
	}
	res, err = a.Purge(ctx, outboxfeed.PurgeRequest{State: outboxfeed.StateDispatched, BatchSize: 2})
	testenv.Must(t, err, "purge dispatched")
	if res.Deleted != 3 || res.Batches != 2 {
		t.Fatalf("purge %+v", res)
	}
	for _, id := range []string{ids[0], ids[1], ids[4]} {
		if _, err := s.Get(ctx, id); !errors.Is(err, outboxfeed.ErrNotFound) {
			t.Fatalf("purged %s: %v", id, err)
		}
	}
	sbWantState[outboxfeed.DeadLetter](t, s, ids[2])
	sbWantState[outboxfeed.Pending](t, s, ids[3])
	res, err = a.Purge(ctx, outboxfeed.PurgeRequest{State: outboxfeed.StateDeadLetter})
	testenv.Must(t, err, "purge dead letters")
	if res.Deleted != 1 {
		t.Fatalf("dead-letter purge %+v", res)
	}
	if _, err := s.Get(ctx, ids[2]); !errors.Is(err, outboxfeed.ErrNotFound) {
		t.Fatalf("purged dead letter: %v", err)
	}
	if n := sbCount(t, s, `SELECT count(*) FROM outbox_retry`); n != 1 {
		t.Fatalf("%d queue rows left, want the pending one", n)
	}
	// The batch log keeps only what still covers a record.
	if n := sbCount(t, s, `SELECT count(*) FROM outbox_batch WHERE to_seq < (SELECT min(seq) FROM outbox)`); n != 0 {
		t.Fatalf("%d logged batches cover nothing", n)
	}
	// The pending record is still delivered; new records get new seqs.
	sbMakeDue(t, s, ids[3])
	newer := sbStage(t, s, sbNote("f", `6`))
	b = sbMustClaim(t, s, "w1", 4)
	sbWantIDs(t, "after the purge", sbIDs(b), []string{ids[3], newer[0]})
	if b.Records[1].Seq != 6 {
		t.Fatalf("new record seq %d, want 6", b.Records[1].Seq)
	}
}

func TestSQLiteBatchRequests(t *testing.T) {
	t.Parallel()
	s := sbStore(t)
	ctx := context.Background()
	for _, req := range []outboxfeed.ClaimRequest{
		{Owner: "", Partition: 0, Limit: 1, Lease: time.Second},
		{Owner: "w", Partition: 1, Limit: 1, Lease: time.Second},
		{Owner: "w", Partition: 0, Limit: 0, Lease: time.Second},
		{Owner: "w", Partition: 0, Limit: 1},
	} {
		if _, err := s.Claim(ctx, req); err == nil {
			t.Errorf("Claim(%+v) accepted", req)
		}
	}
	sbStage(t, s, sbNote("a", `1`))
	b, err := s.Claim(ctx, outboxfeed.ClaimRequest{Owner: "w", Partition: 0, Limit: 1, Lease: time.Second})
	testenv.Must(t, err, "claim partition 0")
	if b == nil || b.Partition != 0 {
		t.Fatalf("claim of partition 0: %+v", b)
	}
	if _, _, err := s.Complete(ctx, b, []outboxfeed.Outcome{{}, {}}, nil); err == nil {
		t.Error("Complete with two outcomes for one record accepted")
	}
	bad := sbReq("w", 1)
	bad.Partition = 3
	if _, _, err := s.Complete(ctx, b, sbAll(b, outboxfeed.OutcomeDone), &bad); err == nil {
		t.Error("Complete with a next claim of partition 3 accepted")
	}
	if _, fence, pos, _ := sbPartition(t, s); fence != 1 || pos != 0 {
		t.Fatalf("a refused completion changed the partition: fence %d pos %d", fence, pos)
	}
	if held, _ := sbComplete(t, s, b, sbAll(b, outboxfeed.OutcomeDone), nil); !held {
		t.Fatal("lease lost")
	}
}

// TestSQLiteBatchPlans checks that the claim, the completion's writes,
// Get and the cheap Stats read by index and rowid range, never the whole
// outbox or a handler's whole queue.
func TestSQLiteBatchPlans(t *testing.T) {
	t.Parallel()
	s := sbStore(t)
	ctx := context.Background()
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"range":   {sqliteRange, []any{1, 2}},
		"ranged":  {sqliteRangeQueued, []any{1, 2, "hooks"}},
		"past":    {sqliteQueuedPast, []any{"hooks", 1}},
		"enqueue": {sqliteEnqueue, []any{"hooks", "[]"}},
		"requeue": {sqliteRequeue, []any{"hooks", "[]", 1}},
		"get":     {`SELECT ` + sqliteRecordColumns + ` FROM outbox_record WHERE handler = ?1 AND id = ?2`, []any{"hooks", "x"}},
		"stats":   {sqliteStats, []any{1, "hooks"}},
		"heads":   {sqliteQueueHeads, []any{"hooks"}},
	} {
		rows, err := s.DB().QueryContext(ctx, "EXPLAIN QUERY PLAN "+q.sql, q.args...)
		testenv.Must(t, err, "explain "+name)
		for rows.Next() {
			var id, parent, unused int
			var detail string
			testenv.Must(t, rows.Scan(&id, &parent, &unused, &detail), "scan plan")
			if len(detail) >= 4 && detail[:4] == "SCAN" && !slices.Contains([]string{
				"SCAN outbox_retry USING COVERING INDEX outbox_retry_pending_idx",
				"SCAN outbox_retry USING COVERING INDEX outbox_retry_dead_letter_idx",
				"SCAN CONSTANT ROW",
				"SCAN x VIRTUAL TABLE INDEX 1:", // the outcomes given
			}, detail) {
				t.Errorf("%s plan scans: %s", name, detail)
			}
		}
		testenv.Must(t, rows.Err(), "plan rows")
		rows.Close()
	}
}

// TestSQLiteBatchMigrateFromV2 upgrades a migration-2 database holding
// records in all four states: pending and processing records are
// delivered exactly once, dispatched ones never again, dead letters stay
// dead letters (and replayable), retries keep their attempts and channel
// order, the seq counter and the fences keep growing.
func TestSQLiteBatchMigrateFromV2(t *testing.T) {
	t.Parallel()
	s := sbOpen(t)
	ctx := context.Background()
	testenv.Must(t, s.migrate(ctx, 2), "migrate to 2")
	now := time.Now().UnixMicro()
	hour := time.Hour.Microseconds()
	type row struct {
		channel, state           string
		attempt                  int
		next                     int64
		owner, lastErr           any
		expires, dispatched, dla any
		fence                    int64
	}
	rows := []row{
		1: {channel: "a", state: "dispatched", dispatched: now - 3*hour, fence: 1},
		2: {channel: "a", state: "dead_letter", attempt: 3, lastErr: "poison", dla: now - 2*hour, fence: 3},
		3: {channel: "b", state: "pending"},
		4: {channel: "a", state: "dispatched", dispatched: now - hour, fence: 1},
		5: {channel: "c", state: "processing", owner: "old-worker", expires: now + hour, fence: 7},
		6: {channel: "d", state: "pending", attempt: 2, next: now + hour, lastErr: "broker down", fence: 2},
		7: {channel: "d", state: "pending"},
		8: {channel: "b", state: "pending"},
		9: {channel: "e", state: "dispatched", dispatched: now, fence: 1},
	}
	ids := make([]string, len(rows))
	for seq := 1; seq < len(rows); seq++ {
		r := rows[seq]
		if r.next == 0 {
			r.next = now
		}
		err := s.DB().QueryRowContext(ctx, `INSERT INTO outbox (tenant_id, channel, type, schema_version, payload, occurred_at,
	state, attempt, next_attempt_at, lease_owner, lease_expires_at, fence, last_error, dispatched_at, dead_lettered_at)
VALUES ('acme', ?, 'order.updated', 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
			r.channel, `{"seq":`+string(rune('0'+seq))+`}`, now-10*hour+int64(seq), r.state, r.attempt, r.next,
			r.owner, r.expires, r.fence, r.lastErr, r.dispatched, r.dla).Scan(&ids[seq])
		testenv.Must(t, err, "insert v2 row")
	}
	sbExec(t, s, `DELETE FROM outbox WHERE seq = 9`) // purged: its seq must never come back

	testenv.Must(t, s.Migrate(ctx), "migrate to 3")
	testenv.Must(t, s.Migrate(ctx), "migrate again")
	if v := sbCount(t, s, `SELECT max(version) FROM schema_migrations`); v != int64(len(sqliteMigrations)) {
		t.Fatalf("schema version %d", v)
	}
	var cols []string
	crow, err := s.DB().QueryContext(ctx, `SELECT name FROM pragma_table_info('outbox') ORDER BY cid`)
	testenv.Must(t, err, "table info")
	for crow.Next() {
		var c string
		testenv.Must(t, crow.Scan(&c), "scan column")
		cols = append(cols, c)
	}
	crow.Close()
	sbWantIDs(t, "outbox columns", cols, []string{"seq", "id", "tenant_id", "channel", "type", "schema_version", "payload", "freshness", "occurred_at", "kind"})
	owner, fence, pos, claimTo := sbPartition(t, s)
	if owner.Valid || fence != 7 || pos != 2 || claimTo.Valid {
		t.Fatalf("migrated partition: owner %v fence %d pos %d claim_to %v", owner, fence, pos, claimTo)
	}
	if d := sbWantState[outboxfeed.Dispatched](t, s, ids[1]); !d.At.Equal(micros(now - 3*hour)) {
		// at or below the position: the latest dispatched_at of that range
		t.Fatalf("migrated dispatched below the position: %+v", d)
	}
	if d := sbWantState[outboxfeed.Dispatched](t, s, ids[4]); !d.At.Equal(micros(now - hour)) {
		t.Fatalf("migrated dispatched above the position: %+v", d)
	}
	if d := sbWantState[outboxfeed.DeadLetter](t, s, ids[2]); d.Reason != "poison" || d.Attempts != 3 || !d.At.Equal(micros(now-2*hour)) {
		t.Fatalf("migrated dead letter %+v", d)
	}
	sbWantState[outboxfeed.Pending](t, s, ids[3])
	sbWantState[outboxfeed.Pending](t, s, ids[5]) // its old lease means nothing now
	if p := sbWantState[outboxfeed.Pending](t, s, ids[6]); p.Attempt != 2 || p.LastError != "broker down" || !p.NextAttemptAt.Equal(micros(now+hour)) {
		t.Fatalf("migrated retry %+v", p)
	}
	as, err := s.Admin().Stats(ctx)
	testenv.Must(t, err, "admin stats")
	if !reflect.DeepEqual(as.States, map[string]int64{outboxfeed.StatePending: 5, outboxfeed.StateProcessing: 0, outboxfeed.StateDispatched: 2, outboxfeed.StateDeadLetter: 1}) {
		t.Fatalf("migrated states %v", as.States)
	}

	// Deliver everything; count each record.
	delivered := map[string]int{}
	deliver := func(b *outboxfeed.Batch) {
		for _, r := range b.Records {
			delivered[r.ID]++
		}
		if held, _ := sbComplete(t, s, b, sbAll(b, outboxfeed.OutcomeDone), nil); !held {
			t.Fatal("lease lost")
		}
	}
	b := sbMustClaim(t, s, "w1", 100)
	sbWantIDs(t, "first batch after the upgrade", sbIDs(b), []string{ids[3], ids[5], ids[8]})
	if _, ok := b.Blocked[fanout.Key{Tenant: "acme", Channel: "d"}]; !ok || b.Fence != 8 || b.Takeover {
		t.Fatalf("first batch: Blocked %v fence %d takeover %v", b.Blocked, b.Fence, b.Takeover)
	}
	deliver(b)
	if b := sbClaim(t, s, "w1", 100); b != nil {
		t.Fatalf("claimed %v while d's retry is not due", sbIDs(b))
	}
	sbMakeDue(t, s, ids[6])
	b = sbMustClaim(t, s, "w1", 100)
	sbWantIDs(t, "d's queue", sbIDs(b), []string{ids[6], ids[7]})
	if b.Records[0].Attempt != 2 {
		t.Fatalf("retry attempt %d after the upgrade", b.Records[0].Attempt)
	}
	deliver(b)
	if b := sbClaim(t, s, "w1", 100); b != nil {
		t.Fatalf("claimed again: %v", sbIDs(b))
	}
	for _, seq := range []int{3, 5, 6, 7, 8} {
		if delivered[ids[seq]] != 1 {
			t.Fatalf("record %d delivered %d times", seq, delivered[ids[seq]])
		}
	}
	if len(delivered) != 5 {
		t.Fatalf("delivered %v", delivered)
	}
	// The dead letter is replayable.
	res, err := s.Admin().Replay(ctx, outboxfeed.ReplayRequest{IDs: []string{ids[2]}, Actor: "ops", Reason: "fixed"})
	testenv.Must(t, err, "replay")
	sbWantIDs(t, "replayed", res.Replayed, []string{ids[2]})
	b = sbMustClaim(t, s, "w1", 100)
	sbWantIDs(t, "replayed dead letter", sbIDs(b), []string{ids[2]})
	deliver(b)

	// Producers: StageSQL and plain SQL of the producers' columns.
	tx, err := s.DB().BeginTx(ctx, nil)
	testenv.Must(t, err, "begin")
	staged, err := stage.StageSQL(ctx, tx, stage.SQLite, sbNote("f", `{"via":"StageSQL"}`))
	testenv.Must(t, err, "StageSQL")
	_, err = tx.ExecContext(ctx, `INSERT INTO outbox (tenant_id, channel, type, schema_version, payload) VALUES ('acme', 'f', 'order.updated', 1, '{"via":"sql"}')`)
	testenv.Must(t, err, "plain insert")
	testenv.Must(t, tx.Commit(), "commit")
	b = sbMustClaim(t, s, "w1", 100)
	if len(b.Records) != 2 || b.Records[0].ID != staged || b.Records[0].Seq != 10 || len(b.Records[1].ID) != 36 {
		t.Fatalf("staged after the upgrade: %+v", b.Records)
	}
	deliver(b)
}

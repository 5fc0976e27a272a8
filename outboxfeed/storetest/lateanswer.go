package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/outboxfeed"
)

// lateStore hands each batch a claim found (a claim's, or that of the
// claim a completion rode on) back lag after the store leased it: the
// answer of a store whose one connection is queued for, or of a slow
// network. The lease runs from the store's claim meanwhile.
type lateStore struct {
	outboxfeed.Store
	lag time.Duration
}

func (s lateStore) Claim(ctx context.Context, req outboxfeed.ClaimRequest) (*outboxfeed.Batch, error) {
	b, err := s.Store.Claim(ctx, req)
	if b != nil {
		time.Sleep(s.lag)
	}
	return b, err
}

func (s lateStore) Complete(ctx context.Context, b *outboxfeed.Batch, out []outboxfeed.Outcome, next *outboxfeed.ClaimRequest) (bool, *outboxfeed.Batch, error) {
	held, nb, err := s.Store.Complete(ctx, b, out, next)
	if nb != nil {
		time.Sleep(s.lag)
	}
	return held, nb, err
}

// testLateClaimAnswer: a store whose claims answer only after half the
// lease has passed. The Worker counts the lease from the claim's sending,
// not from its answer, so each batch starts nothing but its channel's
// first record: the others are given back, charged nothing, and go out
// one batch each, in order. (Counted from the answer, the Worker would
// publish the whole batch past the half of a lease that began earlier,
// leaving its completion less than the half lease it counts on.)
func testLateClaimAnswer(t *testing.T, h *Harness) {
	const lease = 2 * time.Second
	rec := NewRecorder()
	ids := h.Stage(t, true, Note("orders/late", `{"n":1}`), Note("orders/late", `{"n":2}`), Note("orders/late", `{"n":3}`))
	// One lane: no other owner may take a lease over, whatever the
	// machine's pace.
	StartWorker(t, lateStore{Store: h.Store, lag: lease * 6 / 10}, rec, outboxfeed.WorkerConfig{LeaseDuration: lease, Lanes: 1})
	rec.WaitFor(t, time.Minute, "every record published", func() bool { return rec.Count() >= len(ids) })
	ExactlyOnce(t, rec, ids)
	got := rec.Channel(fanout.Key{Tenant: "acme", Channel: "orders/late"})
	if fmt.Sprint(got) != fmt.Sprint(ids) {
		t.Fatalf("published %v, want %v in order", got, ids)
	}
	var fences []int64
	for _, id := range ids {
		msg, _ := rec.ByID(id)
		fences = append(fences, msg.Fence.Value)
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("publications under fences %v, want one batch per record: the batch of a claim answered past half its lease starts only its channel's first record", fences)
		}
	}
	for _, id := range ids {
		EventuallyIn[outboxfeed.Dispatched](t, 30*time.Second, "dispatched", h.Store, id)
		if d := StateOf(t, h.Store, id).(outboxfeed.Dispatched); d.Attempt != 0 {
			t.Fatalf("%s: %#v, want dispatched with no attempt charged", id, d)
		}
	}
}

package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/heraldgw/herald/outboxfeed"
)

// A handler with a ClaimDelay claims the records committed while it waits
// after a partial batch together: records staged one per transaction
// after the first one was delivered, while that batch was still
// uncompleted, are all claimed by one claim. Whether the staging ended
// inside the wait is checked (the first record still uncompleted); if
// the machine was too slow for that, the round is tried again with a
// longer wait.
func testHandlerClaimDelay(t *testing.T, h *Harness, hs outboxfeed.HandlerStore) {
	const later = 10
	for round, delay := 0, 2*time.Second; round < 4; round, delay = round+1, delay*2 {
		name := fmt.Sprintf("lingers%d", round)
		hooks := register(t, hs, name, outboxfeed.StartNew)
		rec := NewRecorder()
		// One lane: nothing claims while it waits.
		w := StartDeliveryWorker(t, hooks, rec, outboxfeed.WorkerConfig{Handler: name, Lanes: 1, BatchSize: 100,
			ClaimDelay: delay, LeaseDuration: 10 * delay})
		ch := fmt.Sprintf("lingers/%d", round)
		firstID := h.Stage(t, true, Note(ch, `{"n":0}`))[0]
		rec.WaitFor(t, time.Minute, "the first record delivered", func() bool { return rec.Count() >= 1 })
		ids := []string{firstID}
		for i := 1; i <= later; i++ {
			ids = append(ids, h.Stage(t, true, Note(ch, fmt.Sprintf(`{"n":%d}`, i)))...)
		}
		_, completed := StateOf(t, hooks, firstID).(outboxfeed.Dispatched)
		rec.WaitFor(t, time.Minute, "every record delivered", func() bool { return rec.Count() >= len(ids) })
		w.Stop()
		ExactlyOnce(t, rec, ids)
		if completed {
			t.Logf("round %d: the first batch completed before the %d records were staged; trying a longer ClaimDelay", round, later)
			continue
		}
		if got := w.Claims(outboxfeed.ClaimBatch); got != 2 {
			t.Fatalf("round %d: %v claims found records, want 2: the first record's, then one for the %d staged while the Worker waited",
				round, got, later)
		}
		return
	}
	t.Fatal("the staging never ended within the Worker's ClaimDelay")
}

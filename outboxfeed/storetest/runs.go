package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/stage"
)

// runRecorder is a Recorder that also takes runs of one channel's
// messages (fanout.RunPublisher), as fanout.MemoryBroker does: each
// message as Publish takes it, stopping at the first that fails.
type runRecorder struct {
	*Recorder
	mu   sync.Mutex
	runs [][]string
}

func (r *runRecorder) PublishRun(ctx context.Context, msgs []fanout.Message, out []fanout.Publication) (int, error) {
	ids := make([]string, len(msgs))
	for i := range msgs {
		ids[i] = msgs[i].ID
	}
	r.mu.Lock()
	r.runs = append(r.runs, ids)
	r.mu.Unlock()
	for i := range msgs {
		if msgs[i].Key != msgs[0].Key {
			return i, fmt.Errorf("%w: a run of two channels", fanout.ErrInvalidMessage)
		}
		p, err := r.Publish(ctx, msgs[i])
		if err != nil {
			return i, err
		}
		out[i] = p
	}
	return len(msgs), nil
}

// A broker that takes runs gets each channel's records of a batch as one
// run, in order; a record the broker refuses in the middle of a run is
// dead-lettered and the rest of the run still goes out, and one that must
// be retried holds back the rest of its channel until it is published.
func testChannelRuns(t *testing.T, h *Harness) {
	rec := &runRecorder{Recorder: NewRecorder()}
	var refused, retried string
	var failedOnce sync.Once
	rec.Before = func(_ context.Context, m fanout.Message) error {
		switch m.ID {
		case refused:
			return fmt.Errorf("%w: refused by the test", fanout.ErrInvalidMessage)
		case retried:
			var err error
			failedOnce.Do(func() { err = outboxfeed.Retryable(errors.New("busy, once")) })
			return err
		}
		return nil
	}
	var notes []stage.Notification
	for i := range 5 {
		n := fmt.Sprintf(`{"n":%d}`, i)
		notes = append(notes, Note("runs/a", n), Note("runs/b", n))
	}
	ids := h.Stage(t, true, notes...)
	var idsA, idsB []string
	for i, id := range ids {
		if i%2 == 0 {
			idsA = append(idsA, id)
		} else {
			idsB = append(idsB, id)
		}
	}
	refused, retried = idsA[2], idsB[1]
	w := StartWorker(t, h.Store, rec, outboxfeed.WorkerConfig{Lanes: 1, BatchSize: 100})
	wantA := append(append([]string{}, idsA[:2]...), idsA[3:]...)
	rec.WaitFor(t, time.Minute, "both channels published", func() bool {
		return len(rec.Channel(fanout.Key{Tenant: "acme", Channel: "runs/a"})) >= len(wantA) &&
			len(rec.Channel(fanout.Key{Tenant: "acme", Channel: "runs/b"})) >= len(idsB)
	})
	EventuallyIn[outboxfeed.DeadLetter](t, time.Minute, "the refused record dead-lettered", h.Store, refused)
	w.Stop()
	if got := rec.Channel(fanout.Key{Tenant: "acme", Channel: "runs/a"}); fmt.Sprint(got) != fmt.Sprint(wantA) {
		t.Fatalf("runs/a published %v, want %v (the refused one left out, the rest in order)", got, wantA)
	}
	if got := rec.Channel(fanout.Key{Tenant: "acme", Channel: "runs/b"}); fmt.Sprint(got) != fmt.Sprint(idsB) {
		t.Fatalf("runs/b published %v, want %v (the retried one before the rest)", got, idsB)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.runs) == 0 || len(rec.runs[0]) != 5 {
		t.Fatalf("runs %v: want the first batch's channels published as runs of 5", rec.runs)
	}
}

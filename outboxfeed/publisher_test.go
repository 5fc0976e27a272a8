package outboxfeed

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/internal/testenv"
)

// The in-memory and Redis brokers are Publishers as they are.
var (
	_ Publisher = (*fanout.MemoryBroker)(nil)
	_ Publisher = (*fanout.RedisBroker)(nil)
	_ Publisher = fanout.Broker(nil)
)

func TestWorkerPublishesToMemoryBroker(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	b, err := fanout.NewMemoryBroker(fanout.MemoryConfig{})
	testenv.Must(t, err, "memory broker")
	defer b.Stop()
	startWorker(t, s, b, WorkerConfig{})
	ctx := context.Background()
	var ids []string
	for i := range 2 {
		id, err := s.StageOne(ctx, note("orders/1", fmt.Sprintf(`{"i":%d}`, i)))
		testenv.Must(t, err, "stage")
		ids = append(ids, id)
	}
	for _, id := range ids {
		eventually(t, 5*time.Second, "dispatched", func() bool {
			_, ok := stateOf(t, s, id).(Dispatched)
			return ok
		})
	}
	r, err := b.Recover(ctx, fanout.Key{Tenant: "acme", Channel: "orders/1"}, fanout.Position{}, 0)
	testenv.Must(t, err, "recover")
	if r.Top.Offset != 2 {
		t.Fatalf("broker top offset = %d, want 2", r.Top.Offset)
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want failureClass
	}{
		{errors.New("dial tcp: connection refused"), failureOutage},
		{context.DeadlineExceeded, failureOutage},
		{Retryable(errors.New("busy")), failureRetry},
		{fmt.Errorf("wrapped: %w", Retryable(errors.New("busy"))), failureRetry},
		{Permanent(errors.New("gone")), failurePermanent},
		{fmt.Errorf("fanout: publish: %w: data is not valid JSON", fanout.ErrInvalidMessage), failurePermanent},
	} {
		if got := classify(tc.err); got != tc.want {
			t.Errorf("classify(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
	if Retryable(nil) != nil || Permanent(nil) != nil {
		t.Fatal("wrapping nil must stay nil")
	}
	if err := Permanent(context.Canceled); !errors.Is(err, context.Canceled) || err.Error() != context.Canceled.Error() {
		t.Fatalf("Permanent hides its cause: %v", err)
	}
}

package webhookhandler

import (
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/webhook"
)

// The handler's Worker keeps the ordinary lease, renewed while requests
// are under way, and gives each call four request timeouts and a second,
// however much longer than the lease that is: a Worker with it starts.
func TestWorkerConfigKeepsTheLease(t *testing.T) {
	cfg := hookConfig("slow", "http://127.0.0.1:9/hook")
	cfg.Timeout = time.Minute
	h, err := New(cfg, nil)
	testenv.Must(t, err, "new handler")
	t.Cleanup(h.Close)
	s := openStore(t).ForHandler(cfg.Name)
	for _, base := range []time.Duration{0, 30 * time.Second, 2 * time.Second} {
		wc := h.WorkerConfig(outboxfeed.WorkerConfig{LeaseDuration: base})
		if wc.LeaseDuration != base {
			t.Errorf("lease %v: the handler's Worker gets a lease of %v, want the ordinary one", base, wc.LeaseDuration)
		}
		if want := 4*time.Minute + time.Second; wc.PublishTimeout != want {
			t.Errorf("lease %v: PublishTimeout %v, want %v", base, wc.PublishTimeout, want)
		}
		if _, err := outboxfeed.NewDeliveryWorker(s, h, wc); err != nil {
			t.Errorf("lease %v: a Worker with the handler's config: %v", base, err)
		}
	}
}

// The handler's Worker takes the endpoint's batch_size (1,000 by default),
// whatever the base's (the realtime handler's) is.
func TestWorkerConfigBatchSize(t *testing.T) {
	for _, c := range []struct{ batch, want int }{{0, webhook.DefaultBatchSize}, {250, 250}, {webhook.MaxBatchSize, webhook.MaxBatchSize}} {
		cfg := hookConfig("batch", "http://127.0.0.1:9/hook")
		cfg.BatchSize = c.batch
		h, err := New(cfg, nil)
		testenv.Must(t, err, "new handler")
		t.Cleanup(h.Close)
		if got := h.WorkerConfig(outboxfeed.WorkerConfig{BatchSize: outboxfeed.DefaultBatchSize}).BatchSize; got != c.want {
			t.Errorf("batch_size %d: the handler's Worker takes batches of %d, want %d", c.batch, got, c.want)
		}
	}
}

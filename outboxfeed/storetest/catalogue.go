package storetest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/stage"
)

// catalogueJSON declares invoice.paid v1 an integration event with a
// payload schema (docs/events.md).
const catalogueJSON = `{"invoice.paid": {"kind": "integration_event", "direction": "published", "trust": "internal",
  "handlers": ["realtime", "app"],
  "versions": {"1": {"schema": {"type": "object", "required": ["invoice_id"], "properties": {"invoice_id": {"type": "string"}}}}}}}`

// A record whose payload fails its schema, or whose kind is not the
// catalogue's, is dead-lettered by every handler's Worker with the reason,
// before the handler sees it; the valid ones reach every handler.
func testCatalogueDeadLetters(t *testing.T, h *Harness, hs outboxfeed.HandlerStore) {
	reg, err := outboxfeed.ParseRegistry([]byte(catalogueJSON))
	if err != nil {
		t.Fatal(err)
	}
	app := register(t, hs, "app", outboxfeed.StartRetained)
	var mu sync.Mutex
	var handled []string
	StartHandlerWorker(t, app, outboxfeed.HandlerFunc(func(_ context.Context, recs []outboxfeed.Record) []error {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range recs {
			handled = append(handled, r.ID)
		}
		return make([]error, len(recs))
	}), outboxfeed.WorkerConfig{Handler: "app", Registry: reg})
	rec := NewRecorder()
	StartWorker(t, h.Store, rec, outboxfeed.WorkerConfig{Registry: reg})

	event := func(payload, kind string) stage.Notification {
		n := Note("billing/1", payload)
		n.Type, n.Kind = "invoice.paid", kind
		return n
	}
	ids := h.Stage(t, true,
		event(`{"invoice_id": "in_1"}`, stage.KindIntegrationEvent),
		event(`{"invoice_id": 7}`, stage.KindIntegrationEvent),
		event(`{"amount": 5}`, stage.KindIntegrationEvent),
		event(`{"invoice_id": "in_2"}`, stage.KindNotification),
		event(`{"invoice_id": "in_3"}`, stage.KindIntegrationEvent))
	want := []string{ids[0], ids[4]}
	rec.WaitFor(t, 10*time.Second, "the valid records published", func() bool { return rec.Count() == 2 })
	Eventually(t, 10*time.Second, "the valid records handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == 2
	})
	mu.Lock()
	got := slices.Clone(handled)
	mu.Unlock()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the Go handler got %v, want %v", got, want)
	}
	for _, s := range []outboxfeed.Store{h.Store, app} {
		for i, reason := range map[int]string{
			1: "payload fails the schema of invoice.paid v1: ",
			2: "payload fails the schema of invoice.paid v1: ",
			3: "kind notification does not match the catalogue's integration_event for invoice.paid v1",
		} {
			EventuallyIn[outboxfeed.DeadLetter](t, 10*time.Second, "dead letter", s, ids[i])
			dl := StateOf(t, s, ids[i]).(outboxfeed.DeadLetter)
			if !strings.HasPrefix(dl.Reason, reason) {
				t.Fatalf("record %d: reason %q, want it to start with %q", i, dl.Reason, reason)
			}
		}
	}
	if dl := StateOf(t, app, ids[1]).(outboxfeed.DeadLetter); !strings.Contains(dl.Reason, "invoice_id") || !strings.Contains(dl.Reason, "string") {
		t.Fatalf("the schema error does not say what is wrong: %q", dl.Reason)
	}
}

package storetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/outboxfeed"
)

// RunReaders is the conformance suite of the Workers' reader rows
// (outboxfeed.ReaderRegistry, docs/events.md): each running Worker
// reports the (type, version) pairs it reads on start, periodically and
// on Stop, and CheckReaders names the live ones that cannot read a pair.
// The store must implement outboxfeed.HandlerStore and
// outboxfeed.ReaderRegistry. ageReader makes the named Worker's row look
// last seen age ago.
func RunReaders(t *testing.T, setup func(t *testing.T) *Harness, ageReader func(t *testing.T, h *Harness, handler, owner string, age time.Duration)) {
	t.Run("WorkersReportWhatTheyRead", func(t *testing.T) {
		t.Parallel()
		h := setup(t)
		hs, ok := h.Store.(outboxfeed.HandlerStore)
		if !ok {
			t.Fatalf("storetest: %T does not implement outboxfeed.HandlerStore", h.Store)
		}
		rr, ok := h.Store.(outboxfeed.ReaderRegistry)
		if !ok {
			t.Fatalf("storetest: %T does not implement outboxfeed.ReaderRegistry", h.Store)
		}
		testReaders(t, h, hs, rr, ageReader)
	})
}

func testReaders(t *testing.T, h *Harness, hs outboxfeed.HandlerStore, rr outboxfeed.ReaderRegistry,
	ageReader func(t *testing.T, h *Harness, handler, owner string, age time.Duration)) {
	ctx := context.Background()
	v12, err := outboxfeed.ParseRegistry([]byte(`{"order.updated": {"versions": [1, 2]}}`))
	if err != nil {
		t.Fatal(err)
	}
	v1, err := outboxfeed.ParseRegistry([]byte(`{"order.updated": {"versions": [1]}}`))
	if err != nil {
		t.Fatal(err)
	}
	app := register(t, hs, "app", outboxfeed.StartRetained)
	StartWorker(t, h.Store, NewRecorder(), outboxfeed.WorkerConfig{Owner: "rt-new", Registry: v12})
	old := StartWorker(t, h.Store, NewRecorder(), outboxfeed.WorkerConfig{Owner: "rt-old", Registry: v1})
	StartDeliveryWorker(t, app, NewRecorder(), outboxfeed.WorkerConfig{Handler: "app", Owner: "app-any"})

	readers := func() []outboxfeed.ReaderInfo {
		t.Helper()
		rs, err := rr.Readers(ctx)
		if err != nil {
			t.Fatalf("readers: %v", err)
		}
		return rs
	}
	owners := func(rs []outboxfeed.ReaderInfo) string {
		var o []string
		for _, r := range rs {
			o = append(o, r.Handler+"/"+r.Owner)
		}
		return strings.Join(o, " ")
	}
	Eventually(t, 10*time.Second, "three Workers reporting", func() bool { return len(readers()) == 3 })
	rs := readers()
	if got := owners(rs); got != "app/app-any realtime/rt-new realtime/rt-old" {
		t.Fatalf("readers %q", got)
	}
	if r := rs[0]; len(r.Reads) != 1 || r.Reads[0] != outboxfeed.AnyType || r.StartedAt.IsZero() || r.SeenAt.Before(r.StartedAt) {
		t.Fatalf("a Worker without a catalogue: %+v", r)
	}
	if r := rs[1]; len(r.Reads) != 2 || r.Reads[1] != (outboxfeed.TypeVersion{Type: "order.updated", Version: 2}) {
		t.Fatalf("rt-new reads %v", r.Reads)
	}

	v2 := outboxfeed.TypeVersion{Type: "order.updated", Version: 2}
	if err := outboxfeed.CheckReaders(rs, outboxfeed.TypeVersion{Type: "order.updated", Version: 1}, nil); err != nil {
		t.Fatalf("v1: %v", err)
	}
	err = outboxfeed.CheckReaders(rs, v2, nil)
	if !errors.Is(err, outboxfeed.ErrIncompatibleReaders) || !strings.Contains(err.Error(), "realtime/rt-old") ||
		strings.Contains(err.Error(), "rt-new") || strings.Contains(err.Error(), "app-any") {
		t.Fatalf("v2 with rt-old running: %v", err)
	}
	if err := outboxfeed.CheckReaders(rs, v2, []string{"app"}); err != nil {
		t.Fatalf("v2 for handler app only: %v", err)
	}
	if err := outboxfeed.CheckReaders(rs, v2, []string{"app", "billing"}); err == nil || !strings.Contains(err.Error(), "no live Worker of handler billing") {
		t.Fatalf("v2 for a handler with no Worker: %v", err)
	}

	// A Worker killed without Stop: its row goes stale and is ignored.
	if err := rr.Heartbeat(ctx, outboxfeed.RealtimeHandler, "rt-killed", nil); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	ageReader(t, h, outboxfeed.RealtimeHandler, "rt-killed", outboxfeed.ReaderLiveWithin+time.Second)
	if got := owners(readers()); strings.Contains(got, "rt-killed") {
		t.Fatalf("a stale row is listed: %q", got)
	}

	// Stop forgets the Worker's row: v2 is now read by every live Worker.
	old.Stop()
	rs = readers()
	if got := owners(rs); got != "app/app-any realtime/rt-new" {
		t.Fatalf("after Stop: readers %q", got)
	}
	if err := outboxfeed.CheckReaders(rs, v2, nil); err != nil {
		t.Fatalf("v2 once rt-old stopped: %v", err)
	}
	if err := outboxfeed.CheckReaders(nil, v2, nil); err == nil || !strings.Contains(err.Error(), "no live Worker at all") {
		t.Fatalf("no Worker: %v", err)
	}
}

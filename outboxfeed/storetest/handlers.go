package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/stage"
)

// RunHandlers is the conformance suite of handlers (docs/handlers.md):
// several consumers of one log, each with its own positions, retries,
// dead letters and state. The store must implement
// outboxfeed.HandlerStore.
func RunHandlers(t *testing.T, setup func(t *testing.T) *Harness) {
	runParallel(t, []namedCase[func(t *testing.T, h *Harness, hs outboxfeed.HandlerStore)]{
		{"FailingHandlerHoldsBackNoOther", testHandlerFailingOtherDrains},
		{"DeadLetterAndReplayPerHandler", testHandlerDeadLetterReplay},
		{"PauseAndResume", testHandlerPauseResume},
		{"RoutesPassOverAndUnroutedCounted", testHandlerRoutes},
		{"StartPoints", testHandlerStartPoints},
		{"GoneDisablesUntilEnabled", testHandlerGone},
		{"DisableNeverOverridesALaterDecision", testHandlerDisableConditional},
		{"FailingPastHorizonDisables", testHandlerHorizon},
		{"GoHandlerGetsChannelBatchesInOrder", testGoHandler},
		{"DropKeepsOthers", testHandlerDrop},
		{"CatalogueDeadLettersForEveryHandler", testCatalogueDeadLetters},
		{"YieldsToRealtimeBacklogWithoutStarving", testHandlerYields},
		{"ClaimDelayClaimsWhatCameMeanwhileTogether", testHandlerClaimDelay},
	}, func(t *testing.T, fn func(t *testing.T, h *Harness, hs outboxfeed.HandlerStore)) {
		h := setup(t)
		hs, ok := h.Store.(outboxfeed.HandlerStore)
		if !ok {
			t.Fatalf("storetest: %T does not implement outboxfeed.HandlerStore", h.Store)
		}
		fn(t, h, hs)
	})
}

// register registers a handler and returns its Store.
func register(t *testing.T, hs outboxfeed.HandlerStore, name string, start outboxfeed.StartFrom) outboxfeed.Store {
	t.Helper()
	created, err := hs.RegisterHandler(context.Background(), outboxfeed.HandlerSpec{Name: name, Type: "webhook", Start: start})
	if err != nil || !created {
		t.Fatalf("register %s: created %v, %v", name, created, err)
	}
	return hs.ForHandler(name)
}

// stageSpread stages n records over channels orders/0..orders/(ch-1) in
// transactions of 100, and returns their ids in staging order.
func stageSpread(t *testing.T, h *Harness, n, ch int) []string {
	t.Helper()
	var ids []string
	for len(ids) < n {
		var ns []stage.Notification
		for i := len(ids); i < n && len(ns) < 100; i++ {
			ns = append(ns, Note(fmt.Sprintf("orders/%d", i%ch), fmt.Sprintf(`{"n":%d}`, i)))
		}
		ids = append(ids, h.Stage(t, true, ns...)...)
	}
	return ids
}

// inChannelOrder checks that rec got each channel's ids in staging order
// (ids staged by stageSpread over ch channels).
func inChannelOrder(t *testing.T, rec *Recorder, ids []string, ch int) {
	t.Helper()
	for c := 0; c < ch; c++ {
		var want []string
		for i := c; i < len(ids); i += ch {
			want = append(want, ids[i])
		}
		got := rec.Channel(fanout.Key{Tenant: "acme", Channel: fmt.Sprintf("orders/%d", c)})
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("orders/%d: got %d records %v..., want %d in staging order", c, len(got), head(got), len(want))
		}
	}
}

func head(s []string) []string { return s[:min(3, len(s))] }

func handlerInfo(t *testing.T, hs outboxfeed.HandlerStore, name string) outboxfeed.HandlerInfo {
	t.Helper()
	list, err := hs.Handlers(context.Background())
	if err != nil {
		t.Fatalf("handlers: %v", err)
	}
	for _, h := range list {
		if h.Name == name {
			return h
		}
	}
	t.Fatalf("handler %s not listed in %+v", name, list)
	return outboxfeed.HandlerInfo{}
}

// One handler fails every one of 1,000 records (its target is down) while
// the other drains them all; once the target is back the first gets every
// record, each channel in order, with no attempt burnt.
func testHandlerFailingOtherDrains(t *testing.T, h *Harness, hs outboxfeed.HandlerStore) {
	hooks := register(t, hs, "hooks", outboxfeed.StartRetained)
	hooksRec, down := FailingRecorder(ErrBrokerDown)
	rt := NewRecorder()
	StartWorker(t, h.Store, rt, outboxfeed.WorkerConfig{})
	hw := StartDeliveryWorker(t, hooks, hooksRec, outboxfeed.WorkerConfig{Handler: "hooks", MaxAttempts: 1,
		OutageMaxDelay: quickOutageRetry})
	ids := stageSpread(t, h, 1000, 20)
	rt.WaitFor(t, 60*time.Second, "realtime drains 1,000 records", func() bool { return rt.Count() >= len(ids) })
	ExactlyOnce(t, rt, ids)
	inChannelOrder(t, rt, ids, 20)
	// On a store with one connection (SQLite) realtime may publish every
	// record before hooks' first claim returns: wait for hooks to try.
	Eventually(t, 30*time.Second, "hooks tries while its target is down", func() bool { return hooksRec.CallCount() > 0 })
	Eventually(t, 30*time.Second, "hooks target down", func() bool { return hw.Metric("herald_outbox_target_up") == 0 })
	if hooksRec.Count() != 0 {
		t.Fatalf("hooks: %d delivered while its target is down", hooksRec.Count())
	}
	st, err := hooks.Stats(context.Background())
	if err != nil || st.Pending != int64(len(ids)) || st.DeadLetter != 0 {
		t.Fatalf("hooks stats = %+v, %v; want all %d pending", st, err, len(ids))
	}
	// Realtime published every record; its last completion may still be
	// under way.
	Eventually(t, 30*time.Second, "realtime has nothing pending", func() bool {
		st, err := h.Store.Stats(context.Background())
		return err == nil && st.Pending == 0
	})
	down.Store(false)
	hooksRec.WaitFor(t, 60*time.Second, "hooks gets every record after the outage", func() bool { return hooksRec.Count() >= len(ids) })
	ExactlyOnce(t, hooksRec, ids)
	inChannelOrder(t, hooksRec, ids, 20)
	if r, d := hw.Outcomes(outboxfeed.OutcomeRetry), hw.Outcomes(outboxfeed.OutcomeDeadLetter); r != 0 || d != 0 {
		t.Fatalf("hooks: retry %v dead_letter %v, want 0: an outage burns no attempt", r, d)
	}
	var seen string
	Eventually(t, 10*time.Second, "hooks target up, not failing", func() bool {
		up, info := hw.Metric("herald_outbox_target_up"), handlerInfo(t, hs, "hooks")
		seen = fmt.Sprintf("target_up %v, failing since %v (%s)", up, info.FailingSince, info.LastError)
		return up == 1 && info.FailingSince.IsZero()
	}, func() string { return seen })
}

// A record one handler dead-letters is dispatched for the other; replaying
// it for its handler (audited with the handler's name) delivers it there
// with its id, and changes nothing for the other.
func testHandlerDeadLetterReplay(t *testing.T, h *Harness, hs outboxfeed.HandlerStore) {
	ctx := context.Background()
	hooks := register(t, hs, "hooks", outboxfeed.StartRetained)
	var rejecting atomic.Bool
	rejecting.Store(true)
	hooksRec := NewRecorder()
	hooksRec.Before = func(_ context.Context, msg fanout.Message) error {
		if msg.Type == "poison.type" && rejecting.Load() {
			return outboxfeed.Permanent(errors.New("422 unprocessable"))
		}
		return nil
	}
	rt := NewRecorder()
	StartWorker(t, h.Store, rt, outboxfeed.WorkerConfig{})
	StartDeliveryWorker(t, hooks, hooksRec, outboxfeed.WorkerConfig{Handler: "hooks"})
	poison := Note("orders/1", `{}`)
	poison.Type = "poison.type"
	ids := h.Stage(t, true, poison, Note("orders/1", `{"n":2}`))
	rt.WaitFor(t, 10*time.Second, "realtime gets both", func() bool { return rt.Count() == 2 })
	hooksRec.WaitFor(t, 10*time.Second, "hooks gets the good one", func() bool { return hooksRec.Count() == 1 })
	Eventually(t, 10*time.Second, "dead letter for hooks only", func() bool {
		_, ok := StateOf(t, hooks, ids[0]).(outboxfeed.DeadLetter)
		return ok
	})
	Eventually(t, 10*time.Second, "dispatched for realtime", func() bool {
		_, ok := StateOf(t, h.Store, ids[0]).(outboxfeed.Dispatched)
		return ok
	})
	if st, _ := h.Store.Stats(ctx); st.DeadLetter != 0 {
		t.Fatalf("realtime has %d dead letters, want 0", st.DeadLetter)
	}
	admin, err := outboxfeed.AdminOf(hooks)
	if err != nil {
		t.Fatal(err)
	}
	rtAdmin, err := outboxfeed.AdminOf(h.Store)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := rtAdmin.Replay(ctx, outboxfeed.ReplayRequest{IDs: []string{ids[0]}, Actor: "ops", Reason: "test"}); err != nil || len(res.Replayed) != 0 {
		t.Fatalf("realtime replay = %+v, %v; want nothing replayed (not its dead letter)", res, err)
	}
	rejecting.Store(false)
	res, err := admin.Replay(ctx, outboxfeed.ReplayRequest{IDs: []string{ids[0]}, Actor: "ops", Reason: "fixed"})
	if err != nil || len(res.Replayed) != 1 {
		t.Fatalf("hooks replay = %+v, %v", res, err)
	}
	hooksRec.WaitFor(t, 10*time.Second, "the replayed record, with its id", func() bool { _, ok := hooksRec.ByID(ids[0]); return ok })
	entries, err := admin.Replays(ctx, ids[0])
	if err != nil || len(entries) != 1 || entries[0].Actor != "ops" || entries[0].Handler != "hooks" {
		t.Fatalf("replay audit = %+v, %v; want one row by ops for hooks", entries, err)
	}
	if rt.Count() != 2 {
		t.Fatalf("realtime delivered %d, want 2: a replay for hooks changes nothing for realtime", rt.Count())
	}
}

// A paused handler claims nothing and its records wait; the others go on;
// resumed, it gets them all.
func testHandlerPauseResume(t *testing.T, h *Harness, hs outboxfeed.HandlerStore) {
	ctx := context.Background()
	hooks := register(t, hs, "hooks", outboxfeed.StartRetained)
	if err := hs.SetHandlerState(ctx, "hooks", outboxfeed.HandlerPaused, "maintenance"); err != nil {
		t.Fatal(err)
	}
	if info := handlerInfo(t, hs, "hooks"); info.State != outboxfeed.HandlerPaused || info.StateReason != "maintenance" {
		t.Fatalf("hooks = %+v, want paused for maintenance", info)
	}
	rt, hooksRec := NewRecorder(), NewRecorder()
	StartWorker(t, h.Store, rt, outboxfeed.WorkerConfig{})
	hw := StartDeliveryWorker(t, hooks, hooksRec, outboxfeed.WorkerConfig{Handler: "hooks"})
	ids := stageSpread(t, h, 50, 5)
	rt.WaitFor(t, 10*time.Second, "realtime gets all", func() bool { return rt.Count() == len(ids) })
	base := hw.Claims("")
	Eventually(t, 10*time.Second, "the paused handler polls", func() bool { return hw.Claims("") >= base+3 })
	if hooksRec.CallCount() != 0 || hw.Claims(outboxfeed.ClaimBatch) != 0 {
		t.Fatalf("paused hooks tried %d deliveries, %v batches", hooksRec.CallCount(), hw.Claims(outboxfeed.ClaimBatch))
	}
	if err := hs.SetHandlerState(ctx, "hooks", outboxfeed.HandlerActive, ""); err != nil {
		t.Fatal(err)
	}
	hooksRec.WaitFor(t, 10*time.Second, "resumed hooks gets all", func() bool { return hooksRec.Count() == len(ids) })
	ExactlyOnce(t, hooksRec, ids)
	inChannelOrder(t, hooksRec, ids, 5)
	if err := hs.SetHandlerState(ctx, "nope", outboxfeed.HandlerPaused, ""); !errors.Is(err, outboxfeed.ErrNoHandler) {
		t.Fatalf("pause of an unknown handler: %v, want ErrNoHandler", err)
	}
}

// Each handler gets what its routes match; the rest is passed over with
// nothing written; a record no handler is routed is counted.
func testHandlerRoutes(t *testing.T, h *Harness, hs outboxfeed.HandlerStore) {
	hooks := register(t, hs, "billing", outboxfeed.StartRetained)
	billingRoutes, err := outboxfeed.CompileRoutes([]outboxfeed.Route{{Kind: "integration_event", Type: "invoice.*"}})
	if err != nil {
		t.Fatal(err)
	}
	rtRoutes, err := outboxfeed.CompileRoutes([]outboxfeed.Route{{Kind: "notification"}})
	if err != nil {
		t.Fatal(err)
	}
	rt, bill := NewRecorder(), NewRecorder()
	r := StartWorker(t, h.Store, rt, outboxfeed.WorkerConfig{Routes: rtRoutes,
		RoutedElsewhere: func(rec *outboxfeed.Record) bool { return billingRoutes.Match(rec) }})
	b := StartDeliveryWorker(t, hooks, bill, outboxfeed.WorkerConfig{Handler: "billing", Routes: billingRoutes})
	note := Note("billing/1", `{}`)
	invoice := Note("billing/1", `{"invoice":1}`)
	invoice.Kind, invoice.Type = "integration_event", "invoice.paid"
	stray := Note("billing/1", `{}`)
	stray.Kind, stray.Type = "integration_event", "customer.created"
	ids := h.Stage(t, true, note, invoice, stray)
	rt.WaitFor(t, 10*time.Second, "realtime gets the notification", func() bool { return rt.Count() >= 1 })
	bill.WaitFor(t, 10*time.Second, "billing gets the invoice", func() bool { return bill.Count() >= 1 })
	Eventually(t, 10*time.Second, "every record done for both", func() bool {
		a, _ := h.Store.Stats(context.Background())
		c, _ := hooks.Stats(context.Background())
		return a.Pending == 0 && c.Pending == 0
	})
	if rt.Count() != 1 || rt.Channel(fanout.Key{Tenant: "acme", Channel: "billing/1"})[0] != ids[0] {
		t.Fatalf("realtime got %d records, want only the notification", rt.Count())
	}
	if bill.Count() != 1 || bill.Channel(fanout.Key{Tenant: "acme", Channel: "billing/1"})[0] != ids[1] {
		t.Fatalf("billing got %d records, want only the invoice", bill.Count())
	}
	Eventually(t, 5*time.Second, "metrics", func() bool {
		return r.Metric("herald_outbox_passed_total") == 2 && b.Metric("herald_outbox_passed_total") == 2 &&
			r.Metric("herald_outbox_unrouted_total") == 1
	})
	for _, id := range ids {
		if _, ok := StateOf(t, hooks, id).(outboxfeed.Dispatched); !ok {
			t.Fatalf("%s: %s for billing, want dispatched (passed over)", id, StateOf(t, hooks, id).Name())
		}
	}
}

// A handler added later starts from the retained records or from new ones.
func testHandlerStartPoints(t *testing.T, h *Harness, hs outboxfeed.HandlerStore) {
	before := h.Stage(t, true, Note("orders/1", `{"n":1}`), Note("orders/2", `{"n":2}`))
	newer := register(t, hs, "newer", outboxfeed.StartNew)
	retained := register(t, hs, "retained", outboxfeed.StartRetained)
	if created, err := hs.RegisterHandler(context.Background(), outboxfeed.HandlerSpec{Name: "newer", Type: "webhook", Start: outboxfeed.StartRetained}); err != nil || created {
		t.Fatalf("registering a known handler again: created %v, %v; want it kept", created, err)
	}
	after := h.Stage(t, true, Note("orders/1", `{"n":3}`))
	nrec, rrec := NewRecorder(), NewRecorder()
	StartDeliveryWorker(t, newer, nrec, outboxfeed.WorkerConfig{Handler: "newer"})
	StartDeliveryWorker(t, retained, rrec, outboxfeed.WorkerConfig{Handler: "retained"})
	rrec.WaitFor(t, 10*time.Second, "retained gets all 3", func() bool { return rrec.Count() == 3 })
	nrec.WaitFor(t, 10*time.Second, "new gets the later one", func() bool { return nrec.Count() >= 1 })
	Eventually(t, 10*time.Second, "newer has nothing pending", func() bool {
		st, _ := newer.Stats(context.Background())
		return st.Pending == 0
	})
	ExactlyOnce(t, nrec, after)
	ExactlyOnce(t, rrec, append(before, after...))
	if info := handlerInfo(t, hs, "newer"); info.Start != outboxfeed.StartNew {
		t.Fatalf("newer = %+v, want start new", info)
	}
}

// A target that is gone (410) disables its handler at once; its records
// wait, none lost, until it is enabled.
func testHandlerGone(t *testing.T, h *Harness, hs outboxfeed.HandlerStore) {
	hooks := register(t, hs, "hooks", outboxfeed.StartRetained)
	rec, gone := FailingRecorder(outboxfeed.Gone(errors.New("410 Gone")))
	// One lane: the handler is disabled before it claims again, so no
	// delivery is under way once it is.
	w := StartDeliveryWorker(t, hooks, rec, outboxfeed.WorkerConfig{Handler: "hooks", Lanes: 1})
	ids := stageSpread(t, h, 10, 2)
	Eventually(t, 10*time.Second, "hooks disabled", func() bool {
		return handlerInfo(t, hs, "hooks").State == outboxfeed.HandlerDisabled
	})
	Eventually(t, 5*time.Second, "disabled gauge", func() bool { return w.Metric("herald_outbox_handler_disabled") == 1 })
	if rec.Count() != 0 {
		t.Fatalf("delivered %d while gone", rec.Count())
	}
	calls := rec.CallCount()
	base := w.Claims("")
	Eventually(t, 10*time.Second, "the disabled handler polls", func() bool { return w.Claims("") >= base+3 })
	if rec.CallCount() != calls {
		t.Fatalf("a disabled handler tried %d more deliveries", rec.CallCount()-calls)
	}
	if info := handlerInfo(t, hs, "hooks"); info.StateReason == "" {
		t.Fatalf("disabled with no reason: %+v", info)
	}
	gone.Store(false)
	if err := hs.SetHandlerState(context.Background(), "hooks", outboxfeed.HandlerActive, "endpoint restored"); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, 10*time.Second, "every record after enable", func() bool { return rec.Count() == len(ids) })
	ExactlyOnce(t, rec, ids)
	inChannelOrder(t, rec, ids, 2)
}

// A Worker's disable is conditional on the handler's state not having
// changed since the failing batch was claimed: an operator's enable (or
// pause) taken meanwhile stands. Times come from the store's own clock
// (StateAt), so the case holds whatever the clocks of the test and the
// database say.
func testHandlerDisableConditional(t *testing.T, h *Harness, hs outboxfeed.HandlerStore) {
	ctx := context.Background()
	register(t, hs, "hooks", outboxfeed.StartRetained)
	if done, err := hs.DisableHandler(ctx, "hooks", "the target is gone", time.Now()); err != nil || !done {
		t.Fatalf("disable of an active handler = %v, %v; want done", done, err)
	}
	disabled := handlerInfo(t, hs, "hooks")
	if disabled.State != outboxfeed.HandlerDisabled || disabled.StateReason != "the target is gone" || disabled.StateAt.IsZero() {
		t.Fatalf("hooks = %+v, want disabled with the reason and its time", disabled)
	}
	if done, err := hs.DisableHandler(ctx, "hooks", "again", time.Now()); err != nil || done {
		t.Fatalf("disable of a disabled handler = %v, %v; want nothing done", done, err)
	}
	if err := hs.SetHandlerState(ctx, "hooks", outboxfeed.HandlerActive, "endpoint back"); err != nil {
		t.Fatal(err)
	}
	enabled := handlerInfo(t, hs, "hooks")
	// A batch claimed before the enable: its failure is older.
	before := enabled.StateAt.Add(-time.Millisecond)
	if done, err := hs.DisableHandler(ctx, "hooks", "stale failure", before); err != nil || done {
		t.Fatalf("disable by a batch claimed before the enable = %v, %v; want nothing done", done, err)
	}
	if got := handlerInfo(t, hs, "hooks"); got.State != outboxfeed.HandlerActive || got.StateReason != "endpoint back" {
		t.Fatalf("hooks = %+v, want still enabled by the operator", got)
	}
	if err := hs.SetHandlerState(ctx, "hooks", outboxfeed.HandlerPaused, "maintenance"); err != nil {
		t.Fatal(err)
	}
	paused := handlerInfo(t, hs, "hooks")
	if done, err := hs.DisableHandler(ctx, "hooks", "gone while paused", paused.StateAt.Add(time.Hour)); err != nil || done {
		t.Fatalf("disable of a paused handler = %v, %v; want nothing done: the operator's pause stands", done, err)
	}
	if err := hs.SetHandlerState(ctx, "hooks", outboxfeed.HandlerActive, ""); err != nil {
		t.Fatal(err)
	}
	// A batch claimed after the enable disables it.
	after := handlerInfo(t, hs, "hooks").StateAt.Add(time.Millisecond)
	if done, err := hs.DisableHandler(ctx, "hooks", "gone again", after); err != nil || !done {
		t.Fatalf("disable by a batch claimed after the enable = %v, %v; want done", done, err)
	}
	if _, err := hs.DisableHandler(ctx, "nope", "", time.Now()); !errors.Is(err, outboxfeed.ErrNoHandler) {
		t.Fatalf("disable of an unknown handler: %v, want ErrNoHandler", err)
	}
}

// A target failing continuously for longer than DisableAfter gets its
// handler disabled.
func testHandlerHorizon(t *testing.T, h *Harness, hs outboxfeed.HandlerStore) {
	hooks := register(t, hs, "hooks", outboxfeed.StartRetained)
	rec := NewRecorder()
	rec.Before = func(context.Context, fanout.Message) error { return outboxfeed.Retryable(errors.New("500 internal")) }
	StartDeliveryWorker(t, hooks, rec, outboxfeed.WorkerConfig{Handler: "hooks", DisableAfter: 300 * time.Millisecond, MaxAttempts: 1000})
	h.Stage(t, true, Note("orders/1", `{}`))
	Eventually(t, 20*time.Second, "hooks disabled after failing past its horizon", func() bool {
		return handlerInfo(t, hs, "hooks").State == outboxfeed.HandlerDisabled
	})
	info := handlerInfo(t, hs, "hooks")
	if info.FailingSince.IsZero() || info.LastError == "" {
		t.Fatalf("hooks = %+v, want failing since and last error", info)
	}
}

// A Go handler gets each channel's records in order, in batches, and a
// record it failed is delivered again, before the rest of its channel.
func testGoHandler(t *testing.T, h *Harness, hs outboxfeed.HandlerStore) {
	app := register(t, hs, "app", outboxfeed.StartRetained)
	var mu sync.Mutex
	got := map[string][]string{}
	var failedOnce atomic.Bool
	var calls atomic.Int32
	done := make(chan struct{}, 1)
	handler := outboxfeed.HandlerFunc(func(_ context.Context, recs []outboxfeed.Record) []error {
		calls.Add(1)
		errs := make([]error, len(recs))
		mu.Lock()
		defer mu.Unlock()
		for i := range recs {
			if recs[i].Channel != recs[0].Channel {
				errs[i] = outboxfeed.Permanent(errors.New("mixed channels in one call"))
				continue
			}
			if recs[i].Channel == "orders/0" && len(got["orders/0"]) == 1 && !failedOnce.Swap(true) {
				for j := i; j < len(recs); j++ {
					errs[j] = outboxfeed.Retryable(errors.New("try again"))
				}
				break
			}
			got[recs[i].Channel] = append(got[recs[i].Channel], recs[i].ID)
		}
		signal(done)
		return errs
	})
	StartHandlerWorker(t, app, handler, outboxfeed.WorkerConfig{Handler: "app"})
	ids := stageSpread(t, h, 40, 2)
	Eventually(t, 20*time.Second, "every record handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got["orders/0"])+len(got["orders/1"]) == len(ids)
	})
	mu.Lock()
	defer mu.Unlock()
	for c := 0; c < 2; c++ {
		var want []string
		for i := c; i < len(ids); i += 2 {
			want = append(want, ids[i])
		}
		if g := got[fmt.Sprintf("orders/%d", c)]; fmt.Sprint(g) != fmt.Sprint(want) {
			t.Fatalf("orders/%d handled %v, want %v", c, g, want)
		}
	}
	if !failedOnce.Load() || int(calls.Load()) >= len(ids) {
		t.Fatalf("failed once %v, %d calls for %d records: want a retry and batches", failedOnce.Load(), calls.Load(), len(ids))
	}
}

// Dropping a handler deletes its rows; the others keep theirs.
func testHandlerDrop(t *testing.T, h *Harness, hs outboxfeed.HandlerStore) {
	ctx := context.Background()
	register(t, hs, "gone-soon", outboxfeed.StartRetained)
	ids := h.Stage(t, true, Note("orders/1", `{}`))
	if err := hs.DropHandler(ctx, "gone-soon"); err != nil {
		t.Fatal(err)
	}
	list, err := hs.Handlers(ctx)
	if err != nil || len(list) != 1 || list[0].Name != outboxfeed.RealtimeHandler {
		t.Fatalf("handlers after drop = %+v, %v; want realtime only", list, err)
	}
	if err := hs.DropHandler(ctx, "gone-soon"); !errors.Is(err, outboxfeed.ErrNoHandler) {
		t.Fatalf("second drop: %v, want ErrNoHandler", err)
	}
	if err := hs.DropHandler(ctx, outboxfeed.RealtimeHandler); !errors.Is(err, outboxfeed.ErrInvalidRequest) {
		t.Fatalf("drop realtime: %v, want ErrInvalidRequest", err)
	}
	rt := NewRecorder()
	StartWorker(t, h.Store, rt, outboxfeed.WorkerConfig{})
	rt.WaitFor(t, 10*time.Second, "realtime unaffected", func() bool { return rt.Count() == 1 })
	ExactlyOnce(t, rt, ids)
}

// A handler that yields to the realtime one (WorkerConfig.YieldsTo) waits
// between batches while realtime has a backlog, yet never starves: it
// delivers while realtime is still draining, at least a batch per lane
// per PollInterval, and both get every record once, each channel in
// order.
func testHandlerYields(t *testing.T, h *Harness, hs outboxfeed.HandlerStore) {
	hooks := register(t, hs, "hooks", outboxfeed.StartRetained)
	ids := stageSpread(t, h, 3000, 20)
	prec := &outboxfeed.Precedence{}
	rt := NewRecorder()
	// A slow target keeps realtime's backlog for a few seconds: every
	// claim of 20 finds a full batch.
	rt.Before = func(context.Context, fanout.Message) error {
		time.Sleep(time.Millisecond)
		return nil
	}
	hooksRec := NewRecorder()
	var rtWhenHooksFirst atomic.Int64
	rtWhenHooksFirst.Store(-1)
	hooksRec.Before = func(context.Context, fanout.Message) error {
		rtWhenHooksFirst.CompareAndSwap(-1, int64(rt.Count()))
		return nil
	}
	StartWorker(t, h.Store, rt, outboxfeed.WorkerConfig{BatchSize: 20, Concurrency: 1, Leads: prec})
	Eventually(t, 30*time.Second, "realtime has a backlog", prec.Busy)
	StartDeliveryWorker(t, hooks, hooksRec, outboxfeed.WorkerConfig{Handler: "hooks", BatchSize: 20, PollInterval: 100 * time.Millisecond, YieldsTo: prec})
	hooksRec.WaitFor(t, 60*time.Second, "hooks delivers while realtime drains", func() bool { return hooksRec.Count() > 0 })
	if n := rtWhenHooksFirst.Load(); n >= int64(len(ids)) {
		t.Fatalf("hooks delivered its first record only once realtime had all %d: it starved", n)
	}
	rt.WaitFor(t, 120*time.Second, "realtime drains", func() bool { return rt.Count() >= len(ids) })
	hooksRec.WaitFor(t, 120*time.Second, "hooks drains", func() bool { return hooksRec.Count() >= len(ids) })
	if prec.Yields() == 0 {
		t.Fatal("hooks never yielded to realtime's backlog")
	}
	ExactlyOnce(t, rt, ids)
	ExactlyOnce(t, hooksRec, ids)
	inChannelOrder(t, rt, ids, 20)
	inChannelOrder(t, hooksRec, ids, 20)
}

package sqlitestore

import (
	"context"
	"errors"
	"testing"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed"
)

// TestSQLiteHandlersAdminScoped checks that each handler's Store and
// Admin see that handler's records only, and that a purge leaves the
// outbox rows while another handler exists.
func TestSQLiteHandlersAdminScoped(t *testing.T) {
	t.Parallel()
	s := sbStore(t)
	ctx := context.Background()
	created, err := s.RegisterHandler(ctx, outboxfeed.HandlerSpec{Name: "hooks", Type: "webhook"})
	testenv.Must(t, err, "register")
	if !created {
		t.Fatal("hooks not created")
	}
	hooks := s.ForHandler("hooks").(*Store)
	ids := sbStage(t, s, sbNote("a", `1`), sbNote("b", `2`), sbNote("c", `3`))

	b := sbMustClaim(t, s, "rt", 10)
	sbComplete(t, s, b, sbAll(b, outboxfeed.OutcomeDone), nil)
	b = sbMustClaim(t, hooks, "hk", 10)
	if b.Fence != 1 {
		t.Fatalf("hooks' first batch under fence %d, want its own fence 1", b.Fence)
	}
	sbComplete(t, hooks, b, []outboxfeed.Outcome{{Kind: outboxfeed.OutcomeDeadLettered, Err: "422"},
		{Kind: outboxfeed.OutcomeDone}, {Kind: outboxfeed.OutcomeRetryLater, Err: "500"}}, nil)

	sbWantState[outboxfeed.Dispatched](t, s, ids[0])
	sbWantState[outboxfeed.DeadLetter](t, hooks, ids[0])
	sbWantState[outboxfeed.Pending](t, hooks, ids[2])
	for _, c := range []struct {
		s                   *Store
		pending, dead, done int64
	}{{s, 0, 0, 3}, {hooks, 1, 1, 1}} {
		st, err := c.s.Stats(ctx)
		testenv.Must(t, err, "stats")
		as, err := c.s.Admin().Stats(ctx)
		testenv.Must(t, err, "admin stats")
		if st.Pending != c.pending || st.DeadLetter != c.dead || as.States[outboxfeed.StateDispatched] != c.done ||
			as.States[outboxfeed.StateDeadLetter] != c.dead || as.States[outboxfeed.StatePending] != c.pending {
			t.Fatalf("%s: stats %+v, admin %v", c.s.Handler(), st, as.States)
		}
		page, err := c.s.Admin().List(ctx, outboxfeed.Filter{State: outboxfeed.StateDeadLetter})
		testenv.Must(t, err, "list")
		if int64(len(page.Records)) != c.dead {
			t.Fatalf("%s lists %d dead letters, want %d", c.s.Handler(), len(page.Records), c.dead)
		}
		parts, err := c.s.Admin().Partitions(ctx)
		testenv.Must(t, err, "partitions")
		if len(parts) != 1 || parts[0].Fence != 1 || parts[0].Batches != 1 {
			t.Fatalf("%s partitions %+v", c.s.Handler(), parts)
		}
	}

	// hooks' purge drops its queue row; the outbox row stays, realtime's.
	res, err := hooks.Admin().Purge(ctx, outboxfeed.PurgeRequest{State: outboxfeed.StateDeadLetter})
	testenv.Must(t, err, "purge hooks' dead letters")
	if res.Deleted != 1 {
		t.Fatalf("hooks purge %+v", res)
	}
	sbWantState[outboxfeed.Dispatched](t, s, ids[0])
	// Realtime's purge (retention's) takes only what hooks is done with
	// too: not ids[2], which hooks still retries.
	res, err = s.Admin().Purge(ctx, outboxfeed.PurgeRequest{State: outboxfeed.StateDispatched, DryRun: true})
	testenv.Must(t, err, "dry run")
	if res.Deleted != 2 {
		t.Fatalf("realtime would purge %d records, want the 2 hooks is done with", res.Deleted)
	}
	// Nor one hooks has not reached yet.
	later := sbStage(t, s, sbNote("d", `4`))
	b = sbMustClaim(t, s, "rt", 10)
	sbWantIDs(t, "realtime's next", sbIDs(b), later)
	sbComplete(t, s, b, sbAll(b, outboxfeed.OutcomeDone), nil)
	res, err = s.Admin().Purge(ctx, outboxfeed.PurgeRequest{State: outboxfeed.StateDispatched, DryRun: true})
	testenv.Must(t, err, "dry run")
	if res.Deleted != 2 {
		t.Fatalf("realtime would purge %d records, want 2: not the one hooks has not reached", res.Deleted)
	}

	// Paused, hooks claims nothing and gives its lease back; its pending
	// record waits.
	sbMakeDue(t, hooks, ids[2])
	testenv.Must(t, s.SetHandlerState(ctx, "hooks", outboxfeed.HandlerPaused, "maintenance"), "pause")
	if b := sbClaim(t, hooks, "hk", 10); b != nil {
		t.Fatalf("a paused handler claimed %v", sbIDs(b))
	}
	testenv.Must(t, s.SetHandlerState(ctx, "hooks", outboxfeed.HandlerActive, ""), "resume")
	b = sbMustClaim(t, hooks, "hk", 10)
	sbWantIDs(t, "after resume", sbIDs(b), append([]string{ids[2]}, later...))
	sbComplete(t, hooks, b, sbAll(b, outboxfeed.OutcomeDone), nil)

	// Dropped, hooks' rows go; realtime's purge then deletes the records.
	testenv.Must(t, s.DropHandler(ctx, "hooks"), "drop")
	if b := sbClaim(t, hooks, "hk", 10); b != nil {
		t.Fatal("a dropped handler claimed")
	}
	for _, table := range []string{"outbox_partition", "outbox_retry", "outbox_batch"} {
		if n := sbCount(t, s, `SELECT count(*) FROM `+table+` WHERE handler = 'hooks'`); n != 0 {
			t.Fatalf("%d rows of hooks left in %s", n, table)
		}
	}
	res, err = s.Admin().Purge(ctx, outboxfeed.PurgeRequest{State: outboxfeed.StateDispatched})
	testenv.Must(t, err, "purge")
	if res.Deleted != 4 {
		t.Fatalf("realtime alone purged %+v, want its 4 dispatched records", res)
	}
	if _, err := s.Get(ctx, ids[0]); !errors.Is(err, outboxfeed.ErrNotFound) {
		t.Fatalf("purged record: %v", err)
	}
}

// TestSQLiteHandlersStartNew checks that a handler added with StartNew
// has nothing of before, even records not yet delivered to realtime.
func TestSQLiteHandlersStartNew(t *testing.T) {
	t.Parallel()
	s := sbStore(t)
	ctx := context.Background()
	old := sbStage(t, s, sbNote("a", `1`))
	_, err := s.RegisterHandler(ctx, outboxfeed.HandlerSpec{Name: "later", Type: "go", Start: outboxfeed.StartNew})
	testenv.Must(t, err, "register")
	later := s.ForHandler("later").(*Store)
	if st, err := later.Stats(ctx); err != nil || st.Pending != 0 {
		t.Fatalf("new handler stats %+v, %v", st, err)
	}
	newer := sbStage(t, s, sbNote("a", `2`))
	b := sbMustClaim(t, later, "w", 10)
	sbWantIDs(t, "later's batch", sbIDs(b), newer)
	b = sbMustClaim(t, s, "w", 10)
	sbWantIDs(t, "realtime's batch", sbIDs(b), append(old, newer...))
	if _, err := later.MarkFailing(ctx, "nope", true, "x"); !errors.Is(err, outboxfeed.ErrNoHandler) {
		t.Fatalf("mark an unknown handler: %v", err)
	}
	if _, err := s.RegisterHandler(ctx, outboxfeed.HandlerSpec{Name: "Bad Name", Type: "go"}); !errors.Is(err, outboxfeed.ErrInvalidConfig) {
		t.Fatalf("bad name: %v", err)
	}
}

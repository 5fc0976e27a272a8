package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/stage"
)

// EveryState names the records of an outbox StageEveryState made, one
// channel per state (tenant acme).
type EveryState struct {
	Dispatched []string // r/done: published
	Dead       []string // r/dead: dead-lettered at the first attempt
	Retry      []string // r/retry: the first failed once and waits an hour for its retry; the second is held behind it
	Claimed    []string // r/claimed: claimed by a Worker that died, its lease expiring at once (nil without claimDead)
	Pending    []string // r/pending: never claimed
}

// StageEveryState stages records with stageFn, one producer's
// transaction each, and lets a Worker take them to every state but
// pending, then stops it. With claimDead, a holder then claims the
// r/claimed records under a lease of lease and never completes; their
// lease has not expired when it returns. The r/pending records are staged
// last.
func StageEveryState(t *testing.T, s outboxfeed.Store, stageFn func(ns ...stage.Notification) []string, claimDead bool, lease time.Duration) EveryState {
	t.Helper()
	ctx := context.Background()
	var e EveryState
	e.Dispatched = stageFn(Note("r/done", `{"n":1}`), Note("r/done", `{"n":2}`))
	e.Dead = stageFn(Note("r/dead", `{"n":1}`))
	e.Retry = stageFn(Note("r/retry", `{"n":1}`), Note("r/retry", `{"n":2}`))
	pub := publisherFunc(func(ctx context.Context, msg fanout.Message) (fanout.Publication, error) {
		switch {
		case msg.Key.Channel == "r/dead":
			return fanout.Publication{}, outboxfeed.Permanent(errors.New("no reader for order.updated v1"))
		case msg.ID == e.Retry[0]:
			return fanout.Publication{}, outboxfeed.Retryable(errors.New("broker said no"))
		}
		return fanout.Publication{Message: msg}, nil
	})
	w := StartWorker(t, s, pub, outboxfeed.WorkerConfig{Concurrency: 1, RetryBaseDelay: time.Hour, RetryMaxDelay: time.Hour})
	Eventually(t, time.Minute, "every record in its state", func() bool {
		_, d1 := StateOf(t, s, e.Dispatched[1]).(outboxfeed.Dispatched)
		_, dl := StateOf(t, s, e.Dead[0]).(outboxfeed.DeadLetter)
		r, rp := StateOf(t, s, e.Retry[0]).(outboxfeed.Pending)
		_, hp := StateOf(t, s, e.Retry[1]).(outboxfeed.Pending)
		return d1 && dl && rp && r.Attempt == 1 && hp
	})
	w.Stop()
	if claimDead {
		e.Claimed = stageFn(Note("r/claimed", `{"n":1}`), Note("r/claimed", `{"n":2}`))
		b, err := s.Claim(ctx, outboxfeed.ClaimRequest{Owner: "dead-worker", Partition: outboxfeed.AnyPartition, Limit: 100, Lease: lease})
		testenv.Must(t, err, "the dead holder's claim")
		if b == nil || len(b.Records) == 0 {
			t.Fatalf("the dead holder claimed nothing")
		}
		var got []string
		for _, r := range b.Records {
			got = append(got, r.ID)
		}
		if fmt.Sprint(got) != fmt.Sprint(e.Claimed) {
			t.Fatalf("the dead holder claimed %v, want %v", got, e.Claimed)
		}
	}
	e.Pending = stageFn(Note("r/pending", `{"n":1}`), Note("r/pending", `{"n":2}`))
	return e
}

// CheckStates fails unless every record of e is in the state it was
// given (the claimed ones pending or processing).
func (e EveryState) CheckStates(t *testing.T, s outboxfeed.Store) {
	t.Helper()
	for _, id := range e.Dispatched {
		if _, ok := StateOf(t, s, id).(outboxfeed.Dispatched); !ok {
			t.Fatalf("dispatched record %s: %#v", id, StateOf(t, s, id))
		}
	}
	if d, ok := StateOf(t, s, e.Dead[0]).(outboxfeed.DeadLetter); !ok || d.Reason == "" {
		t.Fatalf("dead letter %s: %#v", e.Dead[0], StateOf(t, s, e.Dead[0]))
	}
	if p, ok := StateOf(t, s, e.Retry[0]).(outboxfeed.Pending); !ok || p.Attempt != 1 || p.LastError != "broker said no" {
		t.Fatalf("record waiting for its retry %s: %#v", e.Retry[0], StateOf(t, s, e.Retry[0]))
	}
	for _, id := range append(append([]string{e.Retry[1]}, e.Claimed...), e.Pending...) {
		switch st := StateOf(t, s, id).(type) {
		case outboxfeed.Pending, outboxfeed.Processing:
		default:
			t.Fatalf("record %s, not delivered yet: %#v", id, st)
		}
	}
}

// CheckDeliveredOnce runs a Worker of this release over s (the retry made
// due by makeDue) and fails unless it delivers exactly the records of e
// not yet delivered and the extra ones, each once and in order per
// channel, and none delivered before.
func (e EveryState) CheckDeliveredOnce(t *testing.T, s outboxfeed.Store, makeDue func(), extra map[string][]string) {
	t.Helper()
	makeDue()
	want := map[string][]string{"r/retry": e.Retry, "r/pending": e.Pending}
	if e.Claimed != nil {
		want["r/claimed"] = e.Claimed
	}
	for ch, ids := range extra {
		want[ch] = append(want[ch], ids...)
	}
	total := 0
	for _, ids := range want {
		total += len(ids)
	}
	rec := NewRecorder()
	w := StartWorker(t, s, rec, outboxfeed.WorkerConfig{LeaseDuration: time.Second})
	rec.WaitFor(t, time.Minute, "every record not yet delivered", func() bool { return rec.Count() >= total })
	Eventually(t, time.Minute, "every record dispatched", func() bool {
		for _, ids := range want {
			if _, ok := StateOf(t, s, ids[len(ids)-1]).(outboxfeed.Dispatched); !ok {
				return false
			}
		}
		return true
	})
	w.Stop()
	for ch, ids := range want {
		if got := rec.Channel(fanout.Key{Tenant: "acme", Channel: ch}); fmt.Sprint(got) != fmt.Sprint(ids) {
			t.Fatalf("%s delivered %v, want %v (each once, in order)", ch, got, ids)
		}
	}
	if n := rec.Count(); n != total {
		t.Fatalf("%d deliveries, want %d", n, total)
	}
	for _, id := range append(append([]string(nil), e.Dispatched...), e.Dead...) {
		if _, ok := rec.ByID(id); ok {
			t.Fatalf("%s, delivered or dead-lettered before, was published", id)
		}
	}
	if _, ok := StateOf(t, s, e.Dead[0]).(outboxfeed.DeadLetter); !ok {
		t.Fatalf("the dead letter: %#v", StateOf(t, s, e.Dead[0]))
	}
}

// Migrator is a store whose schema goes up and back (both stores' Store).
type Migrator interface {
	outboxfeed.HandlerStore
	Migrate(ctx context.Context) error
	MigrateTo(ctx context.Context, version int) error
	SchemaVersion(ctx context.Context) (int, error)
}

// HandlersRollback checks that the migration bringing handlers goes back
// (to before, the version preceding it) only once realtime is the sole
// handler: refused naming herald handlers drop while a second handler
// exists, done once it is dropped, and upgraded again to realtime alone.
func HandlersRollback(t *testing.T, s Migrator, before int) {
	t.Helper()
	ctx := context.Background()
	_, err := s.RegisterHandler(ctx, outboxfeed.HandlerSpec{Name: "billing", Type: "webhook"})
	testenv.Must(t, err, "register")
	err = s.MigrateTo(ctx, before)
	if !errors.Is(err, outboxfeed.ErrRollbackRefused) || !strings.Contains(err.Error(), "herald handlers drop --yes billing") {
		t.Fatalf("rollback with a second handler = %v, want refused naming herald handlers drop", err)
	}
	testenv.Must(t, s.DropHandler(ctx, "billing"), "drop")
	testenv.Must(t, s.MigrateTo(ctx, before), fmt.Sprintf("roll back to %d", before))
	if v, err := s.SchemaVersion(ctx); err != nil || v != before {
		t.Fatalf("version %d, %v; want %d", v, err, before)
	}
	testenv.Must(t, s.Migrate(ctx), "upgrade again")
	list, err := s.Handlers(ctx)
	if err != nil || len(list) != 1 || list[0].Name != outboxfeed.RealtimeHandler {
		t.Fatalf("handlers after the round trip = %+v, %v", list, err)
	}
}

package pgstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/storetest"

	"github.com/jackc/pgx/v5"
)

// ageReaderRow makes a reader row look last seen age ago.
func ageReaderRow(t *testing.T, h *storetest.Harness, handler, owner string, age time.Duration) {
	t.Helper()
	testenv.Must(t, h.Exec(context.Background(), `UPDATE herald.outbox_reader SET seen_at = now() - interval '`+
		age.String()+`' WHERE handler = '`+handler+`' AND owner = '`+owner+`'`), "age the reader row")
}

func TestPostgresReaders(t *testing.T) {
	t.Parallel()
	storetest.RunReaders(t, pgHarness, ageReaderRow)
}

// A row unseen for a day (a Worker killed long ago) is deleted by the next
// heartbeat of any Worker; a fresh one is kept.
func TestPostgresReaderRowsForgotten(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	for _, owner := range []string{"killed", "alive"} {
		testenv.Must(t, s.Heartbeat(ctx, outboxfeed.RealtimeHandler, owner, nil), "heartbeat")
	}
	_, err := s.Pool().Exec(ctx, `UPDATE herald.outbox_reader SET seen_at = now() - interval '25 hours' WHERE owner = 'killed'`)
	testenv.Must(t, err, "age the row")
	testenv.Must(t, s.Heartbeat(ctx, outboxfeed.RealtimeHandler, "alive", []outboxfeed.TypeVersion{{Type: "a", Version: 1}}), "heartbeat")
	rows, err := s.Pool().Query(ctx, `SELECT owner FROM herald.outbox_reader ORDER BY owner`)
	testenv.Must(t, err, "list rows")
	owners, err := pgx.CollectRows(rows, pgx.RowTo[string])
	testenv.Must(t, err, "rows")
	if len(owners) != 1 || owners[0] != "alive" {
		t.Fatalf("rows %v, want [alive]", owners)
	}
	rs, err := s.Readers(ctx)
	testenv.Must(t, err, "readers")
	if len(rs) != 1 || len(rs[0].Reads) != 1 || rs[0].Reads[0] != (outboxfeed.TypeVersion{Type: "a", Version: 1}) {
		t.Fatalf("readers %+v", rs)
	}
	if err := s.Heartbeat(ctx, "nobody", "x", nil); !errors.Is(err, outboxfeed.ErrNoHandler) {
		t.Fatalf("heartbeat of an unknown handler: %v, want ErrNoHandler", err)
	}
}

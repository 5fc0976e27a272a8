package sqlitestore

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed"
)

// Migration 5 goes back only once realtime is the sole handler.
func TestSQLiteHandlersRollback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSQLiteStore(t)
	_, err := s.RegisterHandler(ctx, outboxfeed.HandlerSpec{Name: "billing", Type: "webhook"})
	testenv.Must(t, err, "register")
	err = s.MigrateTo(ctx, 4)
	if !errors.Is(err, outboxfeed.ErrRollbackRefused) || !strings.Contains(err.Error(), "herald handlers drop --yes billing") {
		t.Fatalf("rollback with a second handler = %v, want refused naming herald handlers drop", err)
	}
	testenv.Must(t, s.DropHandler(ctx, "billing"), "drop")
	testenv.Must(t, s.MigrateTo(ctx, 4), "roll back to 4")
	if v, err := s.SchemaVersion(ctx); err != nil || v != 4 {
		t.Fatalf("version %d, %v; want 4", v, err)
	}
	testenv.Must(t, s.Migrate(ctx), "upgrade again")
	list, err := s.Handlers(ctx)
	if err != nil || len(list) != 1 || list[0].Name != outboxfeed.RealtimeHandler {
		t.Fatalf("handlers after the round trip = %+v, %v", list, err)
	}
}

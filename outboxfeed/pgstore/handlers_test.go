package pgstore

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed"
)

// Migration 8 goes back only once realtime is the sole handler.
func TestPostgresHandlersRollback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newPGStore(t, Config{})
	_, err := s.RegisterHandler(ctx, outboxfeed.HandlerSpec{Name: "billing", Type: "webhook"})
	testenv.Must(t, err, "register")
	err = s.MigrateTo(ctx, 7)
	if !errors.Is(err, outboxfeed.ErrRollbackRefused) || !strings.Contains(err.Error(), "herald handlers drop --yes billing") {
		t.Fatalf("rollback with a second handler = %v, want refused naming herald handlers drop", err)
	}
	testenv.Must(t, s.DropHandler(ctx, "billing"), "drop")
	testenv.Must(t, s.MigrateTo(ctx, 7), "roll back to 7")
	if v, err := s.SchemaVersion(ctx); err != nil || v != 7 {
		t.Fatalf("version %d, %v; want 7", v, err)
	}
	testenv.Must(t, s.Migrate(ctx), "upgrade again")
	list, err := s.Handlers(ctx)
	if err != nil || len(list) != 1 || list[0].Name != outboxfeed.RealtimeHandler {
		t.Fatalf("handlers after the round trip = %+v, %v", list, err)
	}
}

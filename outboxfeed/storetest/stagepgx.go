package storetest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/heraldgw/herald/outboxfeed/stage"
)

// TxBeginner is what StagePgx stages through: a *pgxpool.Pool or a
// *pgx.Conn.
type TxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// StagePgx stages ns in order in one transaction begun on db, the
// producers' path on PostgreSQL (pgx.Tx + stage.Stage), and returns their
// ids. It commits the transaction when commit is set and rolls it back
// otherwise; any error fails the test.
func StagePgx(t testing.TB, db TxBeginner, commit bool, ns ...stage.Notification) []string {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	ids := make([]string, len(ns))
	for i, n := range ns {
		if ids[i], err = stage.Stage(ctx, tx, n); err != nil {
			t.Fatalf("stage: %v", err)
		}
	}
	if commit {
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
	return ids
}

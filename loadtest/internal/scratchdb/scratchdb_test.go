package scratchdb

import (
	"context"
	"testing"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCreateAndDrop(t *testing.T) {
	ctx := context.Background()
	admin := testenv.BaseDatabaseURL()
	db, err := Create(ctx, admin, "herald_scratch_")
	testenv.Must(t, err, "create")
	conn, err := pgx.Connect(ctx, db.URL)
	testenv.Must(t, err, "connect to the new database")
	var name string
	testenv.Must(t, conn.QueryRow(ctx, `SELECT current_database()`).Scan(&name), "current_database")
	if name != db.Name {
		t.Fatalf("connected to %s, want %s", name, db.Name)
	}
	// Drop ends sessions still on it.
	testenv.Must(t, db.Drop(), "drop with a session open")
	_ = conn.Close(ctx)
	var n int
	check, err := pgx.Connect(ctx, admin)
	testenv.Must(t, err, "connect")
	defer check.Close(ctx)
	testenv.Must(t, check.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname = $1`, db.Name).Scan(&n), "look")
	if n != 0 {
		t.Fatalf("%s still exists", db.Name)
	}
	if _, err := Create(ctx, admin, "Bad-Prefix"); err == nil {
		t.Fatal("a prefix that would need quoting was accepted")
	}
}

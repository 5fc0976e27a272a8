package stage_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the database/sql driver "pgx"
	_ "modernc.org/sqlite"             // registers the database/sql driver "sqlite"

	"github.com/heraldgw/herald/outboxfeed/sqlitestore"
	"github.com/heraldgw/herald/outboxfeed/stage"
)

// A backend marks an order paid and stages the notification in the same
// pgx transaction: both commit, or neither does. (Compiled, not run: it
// needs a PostgreSQL database migrated by `herald migrate`.)
func ExampleStage() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)

	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE orders SET status = 'paid' WHERE id = $1`, 1); err != nil {
			return err
		}
		_, err := stage.Stage(ctx, tx, stage.Notification{
			TenantID: "acme", Channel: "orders/1", Type: "order.updated", SchemaVersion: 1,
			Payload: json.RawMessage(`{"status":"paid"}`),
		})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
}

// The same with database/sql over pgx's stdlib driver: DetectDialect reads
// the dialect from the driver once, StageSQL writes that SQL. (Compiled,
// not run.)
func ExampleStageSQL_postgres() {
	ctx := context.Background()
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	dialect, err := stage.DetectDialect(db) // stage.Postgres
	if err != nil {
		log.Fatal(err)
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback() // a no-op after Commit
	if _, err := tx.ExecContext(ctx, `UPDATE orders SET status = 'paid' WHERE id = $1`, 1); err != nil {
		log.Fatal(err)
	}
	id, err := stage.StageSQL(ctx, tx, dialect, stage.Notification{
		TenantID: "acme", Channel: "orders/1", Type: "order.updated", SchemaVersion: 1,
		Payload: json.RawMessage(`{"status":"paid"}`),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	log.Printf("staged %s", id)
}

// An application sharing Herald's embedded SQLite file stages with
// database/sql; a rolled-back transaction stages nothing.
func ExampleStageSQL_sqlite() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "herald-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "herald.db")

	// The schema: what `herald migrate` (or `herald serve`) creates.
	store, err := sqlitestore.Open(ctx, sqlitestore.Config{Path: path})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	// The application's own pool on the same file.
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_txlock=immediate")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id integer PRIMARY KEY, status text NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	dialect, err := stage.DetectDialect(db) // stage.SQLite
	if err != nil {
		log.Fatal(err)
	}

	payOrder := func(id int, commit bool) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			log.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, status) VALUES (?, 'paid')`, id); err != nil {
			log.Fatal(err)
		}
		if _, err := stage.StageSQL(ctx, tx, dialect, stage.Notification{
			TenantID: "acme", Channel: fmt.Sprintf("orders/%d", id), Type: "order.updated", SchemaVersion: 1,
			Payload: json.RawMessage(`{"status":"paid"}`),
		}); err != nil {
			log.Fatal(err)
		}
		if commit {
			if err := tx.Commit(); err != nil {
				log.Fatal(err)
			}
		}
	}
	payOrder(1, true)
	payOrder(2, false) // rolled back

	var orders, staged int
	_ = db.QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&orders)
	_ = db.QueryRowContext(ctx, `SELECT count(*) FROM outbox`).Scan(&staged)
	fmt.Printf("dialect %v: %d order, %d notification staged\n", dialect, orders, staged)
	// Output: dialect sqlite: 1 order, 1 notification staged
}

// DetectDialect reads only the driver's type: no connection is opened.
func ExampleDetectDialect() {
	for _, driver := range []string{"pgx", "sqlite"} {
		db, err := sql.Open(driver, "")
		if err != nil {
			log.Fatal(err)
		}
		d, err := stage.DetectDialect(db)
		fmt.Println(driver, "→", d, err)
		db.Close()
	}
	// Output:
	// pgx → postgres <nil>
	// sqlite → sqlite <nil>
}

// Validate reports what the database would refuse, before the transaction
// fails.
func ExampleNotification_Validate() {
	n := stage.Notification{
		TenantID: "acme", Channel: "orders/1", Type: "Order Updated", SchemaVersion: 1,
		Payload: json.RawMessage(`{"status":"paid"}`),
	}
	fmt.Println(n.Validate())
	// Output: stage: invalid notification: type "Order Updated": byte 'O' is not one of [a-z0-9_.-]
}

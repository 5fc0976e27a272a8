package benchkit

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// BusinessTable is the business row a producer's transaction writes
// beside its outbox record in the producers phases' -business mode: an
// order with an identity key, two numbers, a short text and a time, as an
// application's own table would have.
const BusinessTable = "bench_orders"

// CreateBusinessTable drops and creates BusinessTable in pool's database.
func CreateBusinessTable(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `DROP TABLE IF EXISTS `+BusinessTable+`;
		CREATE TABLE `+BusinessTable+` (
			id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			customer bigint NOT NULL,
			total_cents bigint NOT NULL,
			note text NOT NULL,
			created_at timestamptz NOT NULL DEFAULT now()
		)`)
	if err != nil {
		return fmt.Errorf("business table: %w", err)
	}
	return nil
}

// InsertBusiness inserts business row k in tx, the first statement of a
// business transaction whose outbox record follows.
func InsertBusiness(ctx context.Context, tx pgx.Tx, k int) error {
	if _, err := tx.Exec(ctx, `INSERT INTO `+BusinessTable+` (customer, total_cents, note) VALUES ($1, $2, $3)`,
		int64(k%10_007), int64(1_000+k%90_000), "order placed"); err != nil {
		return fmt.Errorf("business insert: %w", err)
	}
	return nil
}

// CountRows is how many rows table holds (BusinessTable, say).
func CountRows(ctx context.Context, pool *pgxpool.Pool, table string) (int64, error) {
	var n int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil {
		return 0, fmt.Errorf("count %s: %w", table, err)
	}
	return n, nil
}

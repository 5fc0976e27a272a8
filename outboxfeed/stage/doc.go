// Package stage is the producer side of Herald's outbox: the Notification
// a backend stages, its validation, and the functions that insert it inside
// the backend's own transaction, so the notification commits or rolls back
// with the business change.
//
//   - Stage takes a pgx.Tx (PostgreSQL through pgx).
//   - StageSQL takes a *sql.Tx and the Dialect it speaks: Postgres (pgx's
//     database/sql driver, github.com/jackc/pgx/v5/stdlib) or SQLite (the
//     embedded SQLite file Herald uses by default). DetectDialect reads the
//     dialect from a *sql.DB's driver; StageSQL never guesses.
//
// Neither opens a connection of its own. The schema (herald.outbox on
// PostgreSQL, outbox in the SQLite file) is created by `herald migrate` or
// outboxfeed's store Migrate; the Worker that publishes staged records
// lives in outboxfeed.
//
// The package is kept small on purpose: it imports pgx and uuid, and
// neither the SQLite driver, Redis, Prometheus nor the gateway, so an
// application that only stages links only what staging needs. It lives
// under outboxfeed because it writes outboxfeed's tables; importing it
// does not import outboxfeed.
package stage

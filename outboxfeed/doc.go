// Package outboxfeed is Herald's transactional outbox: the schema, the
// staging helpers producers call inside their own transaction, the stores
// (PostgreSQL and embedded SQLite) and the Worker that claims staged records
// under a lease with a fencing value, publishes them to a broker outside any
// transaction, and completes them only while it still owns the lease.
//
// Producers stage with Stage (a pgx.Tx), StageSQL (a *sql.Tx on the SQLite
// file), plain SQL or herald.stage_notification; the record commits or rolls
// back with their business change. Stage, StageSQL and Notification are
// wrappers of package outboxfeed/stage, which an application imports to
// stage without linking this package's drivers (and which also stages on
// PostgreSQL through database/sql). A Worker (NewWorker) then moves each
// record through the sealed lifecycle State: Pending → Processing →
// Dispatched, back to Pending for a retry or a released lease, or to
// DeadLetter for a permanent failure or an exhausted retry budget.
//
// Records of one (tenant, channel) are published in staging (seq) order,
// whatever the number of Workers; channels are independent. Delivery to
// the broker is at-least-once: a record whose Worker lost its lease may be
// published again, always with the same id.
package outboxfeed

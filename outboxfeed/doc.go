// Package outboxfeed is Herald's transactional outbox Worker and its
// vocabulary: the records, their sealed lifecycle State, a claimed Batch
// and its Outcomes, the Store and Admin contracts a store implements, the
// Pruner, and the type registry.
//
// Producers stage records with package outboxfeed/stage inside their own
// business transaction (a pgx.Tx, a database/sql transaction, plain SQL
// or herald.stage_notification): the record commits or rolls back with
// their change. A store keeps them: outboxfeed/pgstore (PostgreSQL) or
// outboxfeed/sqlitestore (an embedded file); outboxfeed/outboxdb opens
// the one a URL names, and outboxfeed/storetest is the conformance suite
// every store passes. A Worker (NewWorker) claims a store's records under
// a partition lease with a fencing value, publishes them to a broker
// outside any transaction, renewing the lease while they are under way,
// and completes them only while it still owns the lease, moving each
// through Pending → Processing → Dispatched, back to Pending for a retry
// or a released lease, or to DeadLetter for a permanent failure or an
// exhausted retry budget.
//
// A record staged after another record's transaction committed is
// published after it on its channel, whatever the number of Workers;
// channels are independent. Delivery to the broker is at-least-once: a
// record whose Worker lost its lease may be published again, always with
// the same id.
package outboxfeed

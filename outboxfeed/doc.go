// Package outboxfeed is Herald's transactional outbox: the schema, the
// staging helpers producers call inside their own transaction, the stores
// (PostgreSQL and embedded SQLite) and the Worker that claims staged records
// under a lease with a fencing value, publishes them to a broker outside any
// transaction, and completes them only while it still owns the lease.
package outboxfeed

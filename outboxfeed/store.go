package outboxfeed

import (
	"context"
	"time"
)

// Store is an outbox store: PostgreSQL (outboxfeed/pgstore) or embedded
// SQLite (outboxfeed/sqlitestore); package storetest checks a store
// against this contract. Producers stage records with package stage,
// inside their own transactions. Records are consumed per partition of the channel space,
// in batches, under a partition lease (owner, expiry, fence); every write
// of a batch's outcome is conditional on that lease, so a Worker that lost
// it changes nothing.
type Store interface {
	// Migrate applies the schema migrations not yet applied; running it
	// again is harmless.
	Migrate(ctx context.Context) error
	// Claim leases one partition to req.Owner and returns its next batch
	// (see Batch). With AnyPartition it looks at the free partitions,
	// longest idle first, and leases one that has work (PostgreSQL probes
	// each first, so an idle partition costs no write). A leased partition
	// that turns out to have nothing gets its position advanced and its
	// lease back. It returns nil when no partition it could lease has
	// records.
	Claim(ctx context.Context, req ClaimRequest) (*Batch, error)
	// Complete records the outcome of every record of b (out[i] is the
	// outcome of b.Records[i]) in one conditional step, under b's owner and
	// fence: the partition's position moves past the batch, its completion
	// time is recorded, and only outcomes other than OutcomeDone are
	// written per record. It reports false, changing nothing, when the
	// lease was lost. With next it then claims in the same transaction,
	// keeping the lease when next names b's partition and giving it back
	// otherwise.
	Complete(ctx context.Context, b *Batch, out []Outcome, next *ClaimRequest) (held bool, nb *Batch, err error)
	// CompleteMany completes several batches of one owner and claims
	// again, in one round trip and one transaction: each of cs as Complete
	// would (held[i] is cs[i]'s), going on with its partition when
	// cs[i].GoOn (a claim of it as next, with next's settings), then, with
	// next (AnyPartition), up to max(next.Spread, 1) further partitions
	// with work that nobody holds. It returns the batches claimed: those
	// that went on, in the order of cs, then the new ones. An empty cs
	// claims only. A lane serves every partition with records in one
	// statement this way, instead of one partition a statement.
	CompleteMany(ctx context.Context, cs []Completion, next *ClaimRequest) (held []bool, nbs []*Batch, err error)
	// Renew extends the lease of b's partition, under b's owner and
	// fence, to lease from now (never shortening it), while b's records
	// are being delivered. It returns an error wrapping ErrLeaseLost,
	// changing nothing, when the lease is lost: another owner claimed the
	// partition, or b was completed. A lease that expired but that nobody
	// took over is still b's (as for Complete), and is renewed.
	Renew(ctx context.Context, b *Batch, lease time.Duration) error
	// Get loads one record by id (ErrNotFound if none).
	Get(ctx context.Context, id string) (Record, error)
	// Stats counts the backlog, cheaply (partial indexes).
	Stats(ctx context.Context) (Stats, error)
	// Wakeups returns a channel that receives a value when new records may
	// be waiting, including once after each (re)connection of the
	// notification listener so the caller drains the backlog. Signals
	// coalesce; the channel is closed once ctx is done and the listener
	// has stopped.
	Wakeups(ctx context.Context) <-chan struct{}
	// Ping reports whether the store answers.
	Ping(ctx context.Context) error
	// Close releases the store's connections.
	Close() error
}

// Stats is a snapshot of the backlog.
type Stats struct {
	// Pending counts records not yet dispatched (pending or processing).
	Pending int64
	// DeadLetter counts dead-lettered records.
	DeadLetter int64
	// OldestPending is the occurred_at of the record at the head of the
	// line: the first pending record in seq order or the oldest one in
	// processing, whichever is older; zero when there is none.
	OldestPending time.Time
	// Now is the store's clock at the reading (PostgreSQL's now(); the
	// process clock for SQLite, which stamps records with it), so the
	// oldest record's age does not depend on the reader's clock.
	Now time.Time
}

// Completion is one batch's outcomes for Store.CompleteMany.
type Completion struct {
	Batch *Batch
	Out   []Outcome // Out[i] is the outcome of Batch.Records[i]
	// GoOn claims the batch's partition again in the same transaction,
	// as Complete's next naming it does: the lease is kept, and the rest
	// of a range already read is not read again.
	GoOn bool
}

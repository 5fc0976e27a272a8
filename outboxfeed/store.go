package outboxfeed

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Store is an outbox store: PostgreSQL (PGStore) or embedded SQLite
// (SQLiteStore). Every update of a claimed record is conditional on the
// lease owner and fence, so a Worker that lost its lease changes nothing.
type Store interface {
	// Migrate applies the schema migrations not yet applied; running it
	// again is harmless.
	Migrate(ctx context.Context) error
	// StageOne stages n in a transaction of its own (for `herald publish`
	// and tools; producers stage inside their business transaction with
	// Stage or StageSQL). It returns the message id.
	StageOne(ctx context.Context, n Notification) (string, error)
	// Claim first takes back expired claims (each counts a failed attempt:
	// back to pending, or dead_letter once MaxAttempts is reached), then claims up to
	// limit due pending records for owner under a lease of the given
	// duration, skipping every channel that has a record in processing or
	// an earlier pending record not yet due. Records come back in seq order
	// with their new fence, all in state Processing.
	Claim(ctx context.Context, owner string, limit int, lease time.Duration) ([]Record, error)
	// Complete marks dispatched the leases owner still holds (state
	// processing, same owner and fence) and returns how many matched.
	Complete(ctx context.Context, owner string, leases []Lease) (int, error)
	// Retry returns a held lease to pending with attempt+1, the given
	// delay before the next attempt and lastError. It reports whether the
	// lease was still held.
	Retry(ctx context.Context, owner string, l Lease, delay time.Duration, lastError string) (bool, error)
	// DeadLetter moves a held lease to dead_letter with attempt+1 and
	// reason as last_error. It reports whether the lease was still held.
	DeadLetter(ctx context.Context, owner string, l Lease, reason string) (bool, error)
	// Release gives held leases back to pending without burning an attempt
	// and returns how many were still held.
	Release(ctx context.Context, owner string, leases []Lease) (int, error)
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

// maxErrorLen bounds a stored last_error.
const maxErrorLen = 2000

// truncateError makes an error text storable: valid UTF-8 without NUL
// bytes (PostgreSQL text refuses both), cut to maxErrorLen bytes on a rune
// boundary.
func truncateError(s string) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
	if len(s) <= maxErrorLen {
		return s
	}
	cut := maxErrorLen
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// sortBySeq orders claimed records by seq (RETURNING has no order).
func sortBySeq(rs []Record) {
	slices.SortFunc(rs, func(a, b Record) int { return cmp.Compare(a.Seq, b.Seq) })
}

// leasesOfRecords returns the leases of recs.
func leasesOfRecords(recs []Record) []Lease {
	out := make([]Lease, len(recs))
	for i := range recs {
		out[i] = recs[i].Lease()
	}
	return out
}

package outboxfeed

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/heraldgw/herald/outboxfeed/internal/rules"
)

// Admin is the operator's view of an outbox store: counts, listing,
// audited replay of dead letters and batched purges. Both stores implement
// it; get one with AdminOf. Nothing here touches a record's id or payload.
type Admin interface {
	// Stats counts every record by state and by kind, the dead letters by
	// (type, schema_version), and finds the oldest record not yet
	// dispatched. Unlike Store.Stats it counts dispatched records too, so
	// it reads the whole table: an operator command, not a gauge.
	Stats(ctx context.Context) (AdminStats, error)
	// List returns one page of records matching f, in seq order.
	List(ctx context.Context, f Filter) (Page, error)
	// Replay moves the dead letters r selects back to pending (attempt 0,
	// due now, last_error and dead_lettered_at cleared), keeping their id
	// and payload, and writes one outbox_replay row per record (actor,
	// reason, time, the failure it answers) in the same transaction. A
	// requested id that is not a dead letter is reported in Skipped, not
	// as an error. Records are replayed in transactions of r.BatchSize.
	Replay(ctx context.Context, r ReplayRequest) (ReplayResult, error)
	// Purge deletes dispatched or dead-lettered records older than
	// r.OlderThan, in transactions of r.BatchSize rows so it never holds
	// many locks for long; with r.DryRun it only counts them.
	Purge(ctx context.Context, r PurgeRequest) (PurgeResult, error)
	// Replays returns the outbox_replay rows of one message id, oldest
	// first (none for an id never replayed).
	Replays(ctx context.Context, messageID string) ([]ReplayEntry, error)
	// Partitions lists the partitions with their leases.
	Partitions(ctx context.Context) ([]PartitionInfo, error)
	// SetPartitions changes the number of partitions (PostgreSQL; the
	// embedded store has one), keeping each channel's order (see
	// PGStore's procedure in docs/delivery.md).
	SetPartitions(ctx context.Context, n int) error
	// ResetAfterRestore makes positions copied from another PostgreSQL
	// cluster (a logical restore) safe to consume from again, putting
	// every record not known done back in the retry queue (see
	// ErrRestored; the embedded store keeps no transaction ids and refuses).
	ResetAfterRestore(ctx context.Context) (ResetResult, error)
}

// Admin sentinel errors; test with errors.Is.
var (
	// ErrInvalidRequest wraps every invalid Filter, ReplayRequest or
	// PurgeRequest; nothing was changed.
	ErrInvalidRequest = errors.New("outboxfeed: invalid request")
	// ErrNoAdmin is returned by AdminOf for a Store without an Admin.
	ErrNoAdmin = errors.New("outboxfeed: store has no admin interface")
	// ErrPrunerStopped is returned by Pruner.Start after Stop (the same
	// error as ErrStopped).
	ErrPrunerStopped = ErrStopped
)

// AdminOf returns the Admin of s: PGStore and SQLiteStore have one, and a
// wrapping Store can offer one through an `Admin() Admin` method.
func AdminOf(s Store) (Admin, error) {
	if a, ok := s.(interface{ Admin() Admin }); ok {
		return a.Admin(), nil
	}
	return nil, fmt.Errorf("%w: %T", ErrNoAdmin, s)
}

// AdminStats is a full count of the outbox.
type AdminStats struct {
	// Now is the store's clock when the counts were taken.
	Now time.Time
	// States counts records per state; all four states are present.
	States map[string]int64
	// Kinds counts records per kind (only kinds that have records).
	Kinds map[string]int64
	// OldestPending is the occurred_at of the record at the head of the
	// line (as in Stats); zero when nothing waits.
	OldestPending time.Time
	// OldestPendingAge is Now − OldestPending, zero when nothing waits.
	OldestPendingAge time.Duration
	// DeadLetters counts dead letters per (type, schema_version), the
	// largest group first.
	DeadLetters []TypeCount
}

// TypeCount is a number of records of one (type, schema_version).
type TypeCount struct {
	Type          string
	SchemaVersion int
	Count         int64
}

// Filter selects records for List. Empty fields match everything.
type Filter struct {
	// State is one of the four state names, or "" for any.
	State string
	// Type, Tenant and Channel match exactly.
	Type    string
	Tenant  string
	Channel string
	// SchemaVersion, when > 0, matches exactly.
	SchemaVersion int
	// Since (inclusive) and Until (exclusive) bound occurred_at.
	Since time.Time
	Until time.Time
	// Limit is the page size. Default: 100; at most MaxListLimit.
	Limit int
	// After is the cursor of the previous page (Page.Next): only records
	// with a larger seq are returned. Default: 0, the first page.
	After int64
}

// MaxListLimit bounds Filter.Limit.
const MaxListLimit = 10000

// Page is one page of List.
type Page struct {
	// Records are in seq order.
	Records []Record
	// Next is the Filter.After of the following page; 0 when this page was
	// not full (nothing follows).
	Next int64
}

// ReplayRequest selects dead letters to replay. At least one selector
// (IDs, Type, Since, Until) must be set; the selectors given all apply.
type ReplayRequest struct {
	// IDs are message ids. Those that are not dead letters matching the
	// other selectors are reported in ReplayResult.Skipped.
	IDs []string
	// Type, when set, selects dead letters of this type; SchemaVersion,
	// when > 0, narrows it to one version.
	Type          string
	SchemaVersion int
	// Since (inclusive) and Until (exclusive) bound occurred_at.
	Since time.Time
	Until time.Time
	// Actor (who) and Reason (why) are required; they are written to
	// outbox_replay with each record.
	Actor  string
	Reason string
	// Limit is the most records this call replays. Default: 0, no limit.
	Limit int
	// BatchSize is how many records one transaction replays. Default:
	// 1000.
	BatchSize int
}

// ReplayResult says what Replay did.
type ReplayResult struct {
	// Replayed are the ids moved back to pending, in seq order.
	Replayed []string
	// Skipped are the requested IDs that were not replayed.
	Skipped []Skip
}

// Skip is a requested id Replay left alone, and why.
type Skip struct {
	ID string
	// State is the record's state, "" when no record has this id.
	State string
	// Reason says why it was skipped, for people.
	Reason string
}

// PurgeRequest selects records to delete.
type PurgeRequest struct {
	// State is StateDispatched or StateDeadLetter; pending and processing
	// records are never purged.
	State string
	// OlderThan selects records dispatched (or dead-lettered) more than
	// this long ago; 0 selects every record in State. Must not be negative.
	OlderThan time.Duration
	// Type, when set, only purges records of this type; SchemaVersion,
	// when > 0, only those of this version.
	Type          string
	SchemaVersion int
	// DryRun counts what would be deleted and deletes nothing.
	DryRun bool
	// BatchSize is how many rows one transaction deletes. Default: 1000.
	BatchSize int
}

// PurgeResult says what Purge did.
type PurgeResult struct {
	// Deleted is how many records were deleted (with DryRun: would be).
	Deleted int64
	// Batches is how many delete transactions ran (0 with DryRun).
	Batches int
	// Segments is how many whole segments of herald.outbox (PostgreSQL)
	// a purge of dispatched records dropped or truncated: records that went
	// out without failing leave the store only that way, with their
	// segment, once every record in it is done and older than the cutoff.
	// A dry run does not count them, nor does a purge narrowed by type.
	Segments int
	// Cutoff is the time records had to be older than.
	Cutoff time.Time
}

// ReplayEntry is one outbox_replay row.
type ReplayEntry struct {
	// Handler is the handler the record was replayed for.
	Handler   string
	MessageID string
	Actor     string
	Reason    string
	At        time.Time
	// Failure is the last_error of the dead letter the replay answered.
	Failure string
}

// LastError is the failure a state carries: Pending.LastError or
// DeadLetter.Reason; "" for the other states.
func LastError(s State) string {
	switch v := s.(type) {
	case Pending:
		return v.LastError
	case DeadLetter:
		return v.Reason
	}
	return ""
}

// Defaults and bounds of the admin operations.
const (
	defaultListLimit   = 100
	defaultReplayBatch = 1000
	defaultPurgeBatch  = 1000
	maxBatch           = 100000
)

// invalid wraps a request error in ErrInvalidRequest.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidRequest}, args...)...)
}

func validState(s string) bool {
	switch s {
	case StatePending, StateProcessing, StateDispatched, StateDeadLetter:
		return true
	}
	return false
}

// Normalized is f with its defaults, or an error wrapping
// ErrInvalidRequest that says what is wrong with it. Stores call it.
func (f Filter) Normalized() (Filter, error) {
	if f.Limit == 0 {
		f.Limit = defaultListLimit
	}
	return f, f.validate()
}

func (f Filter) validate() error {
	switch {
	case f.State != "" && !validState(f.State):
		return invalid("state %q: want pending, processing, dispatched or dead_letter", f.State)
	case f.Limit < 1 || f.Limit > MaxListLimit:
		return invalid("limit %d: must be between 1 and %d", f.Limit, MaxListLimit)
	case f.After < 0:
		return invalid("after %d: must not be negative", f.After)
	case f.SchemaVersion < 0:
		return invalid("schema version %d: must not be negative", f.SchemaVersion)
	case !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until):
		return invalid("since %v is not before until %v", f.Since, f.Until)
	}
	return nil
}

// Normalized is r with its defaults and its ids in canonical form,
// deduplicated, or an error wrapping ErrInvalidRequest. Stores call it.
func (r ReplayRequest) Normalized() (ReplayRequest, error) {
	if r.BatchSize == 0 {
		r.BatchSize = defaultReplayBatch
	}
	ids, err := r.validate()
	r.IDs = ids
	return r, err
}

// validate checks r and returns its ids in canonical form, deduplicated.
func (r ReplayRequest) validate() ([]string, error) {
	switch {
	case r.Actor == "":
		return nil, invalid("replay needs an actor (who replays)")
	case r.Reason == "":
		return nil, invalid("replay needs a reason (why)")
	case len(r.IDs) == 0 && r.Type == "" && r.Since.IsZero() && r.Until.IsZero():
		return nil, invalid("replay needs a selector: ids, a type or a time range")
	case r.Limit < 0:
		return nil, invalid("limit %d: must not be negative", r.Limit)
	case r.BatchSize < 0 || r.BatchSize > maxBatch:
		return nil, invalid("batch size %d: must be between 1 and %d", r.BatchSize, maxBatch)
	case r.SchemaVersion < 0:
		return nil, invalid("schema version %d: must not be negative", r.SchemaVersion)
	case r.SchemaVersion > 0 && r.Type == "":
		return nil, invalid("schema version %d given without a type", r.SchemaVersion)
	case !r.Since.IsZero() && !r.Until.IsZero() && !r.Since.Before(r.Until):
		return nil, invalid("since %v is not before until %v", r.Since, r.Until)
	}
	if r.Type != "" {
		if err := rules.ValidateType(r.Type); err != nil {
			return nil, invalid("%s", strings.TrimPrefix(err.Error(), "outboxfeed: "))
		}
	}
	seen := make(map[string]bool, len(r.IDs))
	ids := make([]string, 0, len(r.IDs))
	for _, id := range r.IDs {
		if id == "" {
			return nil, invalid("empty id")
		}
		c, err := rules.ParseID(id)
		if err != nil {
			return nil, invalid("id %q is not a uuid", id)
		}
		if !seen[c] {
			seen[c] = true
			ids = append(ids, c)
		}
	}
	return ids, nil
}

// Normalized is r with its defaults, or an error wrapping
// ErrInvalidRequest. Stores call it.
func (r PurgeRequest) Normalized() (PurgeRequest, error) {
	if r.BatchSize == 0 {
		r.BatchSize = defaultPurgeBatch
	}
	return r, r.validate()
}

func (r PurgeRequest) validate() error {
	switch {
	case r.State != StateDispatched && r.State != StateDeadLetter:
		return invalid("purge state %q: want dispatched or dead_letter (pending and processing records are never purged)", r.State)
	case r.OlderThan < 0:
		return invalid("older than %v: must not be negative", r.OlderThan)
	case r.BatchSize < 1 || r.BatchSize > maxBatch:
		return invalid("batch size %d: must be between 1 and %d", r.BatchSize, maxBatch)
	case r.SchemaVersion < 0:
		return invalid("schema version %d: must not be negative", r.SchemaVersion)
	case r.SchemaVersion > 0 && r.Type == "":
		return invalid("schema version %d given without a type", r.SchemaVersion)
	}
	if r.Type != "" {
		if err := rules.ValidateType(r.Type); err != nil {
			return invalid("%s", strings.TrimPrefix(err.Error(), "outboxfeed: "))
		}
	}
	return nil
}

// MaxPartitions bounds the partition count.
const MaxPartitions = 256

// PartitionInfo is one partition's lease row, as operators see it.
type PartitionInfo struct {
	Partition int
	// State is active, retiring (replaced by a new count, still drained),
	// waiting (of the new count, until no partition is retiring) or retired.
	State string
	// Owner and ExpiresAt are the lease, empty when no Worker holds it.
	Owner     string
	ExpiresAt time.Time
	Fence     int64
	// Open says a batch was claimed and not completed yet.
	Open bool
	// Takeovers counts the consecutive claims taken over from a holder
	// that never completed.
	Takeovers int
	// DoneAt is when the last batch completed; Batches how many did.
	DoneAt  time.Time
	Batches int64
}

// ResetResult says what ResetAfterRestore did.
type ResetResult struct {
	// Requeued counts the records put back in the retry queue (due at
	// once): those not done by the old positions, and every record
	// staged after the newest batch the old cluster logged.
	Requeued int64
	// Rewritten counts the records whose transaction id was rewritten.
	Rewritten int64
}

package outboxfeed

import (
	"time"

	"github.com/heraldgw/herald/fanout"
)

// AnyPartition in ClaimRequest.Partition asks for whichever partition is
// free (no holder, or its lease expired) and has waited longest.
const AnyPartition = -1

// ClaimRequest asks a Store for the next batch of one partition.
type ClaimRequest struct {
	// Owner is the lease owner the partition is claimed for.
	Owner string
	// Partition is the partition to claim, or AnyPartition. A partition
	// held by another owner whose lease has not expired is never taken.
	Partition int
	// Limit is the most records the batch holds from the partition's
	// position on (records waiting in the retry queue come on top, at most
	// Limit of them too).
	Limit int
	// Lease is how long the claim stays with Owner.
	Lease time.Duration
	// Arm > 0 arms the wake-up trigger for that long; Disarm disarms it
	// (PostgreSQL with the notify trigger; ignored otherwise).
	Arm    time.Duration
	Disarm bool
	// Durable makes the claim's transaction (and the batch's completion)
	// wait for its WAL flush (PostgreSQL); by default both commit
	// asynchronously: a commit lost to a server crash only means the batch
	// is published again, never that a record is lost.
	Durable bool
	// RangeLimit is how many records of a range the claim reads and holds
	// at once (PostgreSQL; 0: DefaultRangeRecords). A range is published
	// in staging order, so the claim reads the rest of it, sorts it and
	// hands it out Limit records at a time under a renewed lease; a range
	// larger than this is read in runs of its transactions instead.
	RangeLimit int
	// Spread is how many partitions a claim with AnyPartition through
	// Store.CompleteMany may lease at once, each a batch of its own
	// (0 or 1: one). Claim and Complete ignore it.
	Spread int
	// Hold asks Store.CompleteMany to keep the lease of a partition that
	// goes on (Completion.GoOn) and found no new records while another
	// partition of the same step found some: it comes back as a batch of
	// no records, so a flow spread over several partitions is served by
	// one statement a step rather than given back and claimed again. A
	// step whose partitions found nothing gives them all back. A store may
	// ignore it (the embedded store has one partition).
	Hold bool
}

// DefaultRangeRecords is ClaimRequest.RangeLimit's default.
const DefaultRangeRecords = 100_000

// Batch is a claimed partition and the records to dispatch under its
// lease. Records come in dispatch order: for each channel first the
// records its retry queue holds, then the records that became visible
// since the partition's last completed position, each channel's in
// staging order.
type Batch struct {
	// Partition is the claimed partition.
	Partition int
	// Owner and Fence are the lease: every write of the batch's outcome is
	// conditional on both, and publications carry them (fanout.Fence).
	Owner string
	Fence int64
	// Takeover says the previous holder claimed this partition and never
	// completed: some records of the batch may already be in the channel
	// history (published with fanout.Fence.Takeover they are not
	// appended twice).
	Takeover bool
	// Takeovers counts the consecutive claims of this partition that were
	// taken over without being completed (0 for a batch after a
	// completion). The Worker shrinks the batch as it grows, and at
	// MaxAttempts dead-letters the first record of a batch of one: a
	// record that kills every Worker cannot stall its partition forever.
	Takeovers int
	// Records to dispatch, in dispatch order.
	Records []Record
	// Blocked lists channels of this partition whose retry queue holds a
	// record that is not in Records (its retry is not due yet, or the
	// queue holds more than the batch took). The records such a channel
	// has in Records from the retry queue are the head of its queue, in
	// order, and are published; those read from the position must wait
	// behind the rest of the queue: they complete with OutcomeHold (and so
	// join the queue, behind it).
	Blocked map[fanout.Key]struct{}
	// More says the partition holds further records past this batch: the
	// Worker claims again at once.
	More bool

	// Driver is the store's own state of the claim (PostgreSQL: the rest
	// of the range it read, which a completion whose next claim is this
	// partition's goes on with under a renewed lease). The Worker hands the
	// batch back to Complete untouched.
	Driver any

	// leased is when the Worker sent the claim that returned the batch
	// (the claim itself, or the completion it rode on): the store began
	// the lease no earlier, so the Worker counts its lease from there.
	leased time.Time
}

// leasedAt is when b's lease began at the earliest: when its claim was
// sent, or now for a batch the Worker did not claim itself.
func (b *Batch) leasedAt() time.Time {
	if b.leased.IsZero() {
		return time.Now()
	}
	return b.leased
}

// OutcomeKind is what became of one record of a batch.
type OutcomeKind uint8

const (
	// OutcomeDone: the broker accepted it. Nothing is written for it but
	// the batch's position (and, for a record of the retry queue, its
	// completion).
	OutcomeDone OutcomeKind = iota
	// OutcomeRetryLater: a failure of this record; it waits in the retry queue
	// Outcome.Delay with one more attempt and Outcome.Err as last_error,
	// holding back the later records of its channel.
	OutcomeRetryLater
	// OutcomeDeadLettered: it stops here, with Outcome.Err as the reason and
	// one more attempt.
	OutcomeDeadLettered
	// OutcomeHold: not attempted (an earlier record of its channel failed,
	// the broker is down, the Worker is stopping): it keeps its place in
	// its channel, in the retry queue, due at once, no attempt burnt.
	OutcomeHold
)

// Outcome is the result of dispatching one record of a batch.
type Outcome struct {
	Kind  OutcomeKind
	Delay time.Duration // OutcomeRetryLater: how long until the next attempt
	Err   string        // OutcomeRetryLater, OutcomeDeadLettered: last_error
	// Passed (with OutcomeDone): the handler's routes pass the record
	// over; it was not delivered. Stores treat it as done.
	Passed bool
}

// Key is the record's channel.
func (r *Record) Key() fanout.Key { return fanout.Key{Tenant: r.TenantID, Channel: r.Channel} }

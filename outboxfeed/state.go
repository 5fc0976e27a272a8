package outboxfeed

import (
	"encoding/json"
	"time"
)

// State names of the lifecycle, as stored in the state column.
const (
	StatePending    = "pending"
	StateProcessing = "processing"
	StateDispatched = "dispatched"
	StateDeadLetter = "dead_letter"
)

// State is a record's lifecycle state. It is sealed: the only
// implementations are Pending, Processing, Dispatched and DeadLetter, each
// carrying exactly the columns its SQL CHECK constraint requires.
//
// Transitions:
//
//	pending    → processing   Claim (fence+1, lease owner and expiry set)
//	processing → dispatched   Complete, after the broker accepted it
//	processing → pending      Retry (attempt+1, next_attempt_at later),
//	                          Release (no attempt burnt), or lease expiry
//	                          (attempt+1: the holder died or stalled)
//	processing → dead_letter  DeadLetter (permanent failure or retries
//	                          exhausted), or lease expiry at MaxAttempts
//	dead_letter → pending     replay (audited in outbox_replay)
type State interface {
	// Name is the stored state name, e.g. "pending".
	Name() string
	sealed()
}

// Pending is eligible work once NextAttemptAt has passed.
type Pending struct {
	Attempt       int       // failed attempts so far
	NextAttemptAt time.Time // not claimed before this time
	LastError     string    // the last failure, empty if none
}

// Processing is claimed by one Worker under a lease.
type Processing struct {
	LeaseOwner     string    // the Worker holding the lease
	LeaseExpiresAt time.Time // after this the claim returns to pending
	Fence          int64     // incremented by every claim
	Attempt        int       // failed attempts before this claim
}

// Dispatched was accepted by the broker.
type Dispatched struct {
	At      time.Time // when the completion was recorded
	Attempt int       // failed attempts before the successful one
}

// DeadLetter stopped automatic retry; an operator may replay it.
type DeadLetter struct {
	Reason   string    // last_error: why it was dead-lettered
	Attempts int       // failed attempts, the last one included
	At       time.Time // dead_lettered_at
}

// Name implements State.
func (Pending) Name() string { return StatePending }

// Name implements State.
func (Processing) Name() string { return StateProcessing }

// Name implements State.
func (Dispatched) Name() string { return StateDispatched }

// Name implements State.
func (DeadLetter) Name() string { return StateDeadLetter }

func (Pending) sealed()    {}
func (Processing) sealed() {}
func (Dispatched) sealed() {}
func (DeadLetter) sealed() {}

// Record is one stored outbox row.
type Record struct {
	ID            string
	Seq           int64 // insertion order; per-channel dispatch order
	TenantID      string
	Channel       string
	Type          string
	SchemaVersion int
	Payload       json.RawMessage
	Freshness     json.RawMessage
	OccurredAt    time.Time
	Kind          string
	Attempt       int   // failed attempts so far
	Fence         int64 // the fencing value of the latest claim
	State         State

	// PayloadIsJSON says the store guarantees Payload is JSON
	// (PostgreSQL's jsonb), so the Worker need not check it again.
	PayloadIsJSON bool
	// Queued is the record's row in its partition's retry queue, set by
	// the store (0: read from the partition's position, no row anywhere
	// but the outbox).
	Queued int64
	// TxID is the transaction that staged it, where the store keeps one
	// (PostgreSQL; 0 for queued records); for the store's own use.
	TxID uint64
}

// Lease is what a Worker must present to update a claimed record.
type Lease struct {
	ID    string
	Fence int64
}

// Lease returns the record's id and current fence.
func (r *Record) Lease() Lease { return Lease{ID: r.ID, Fence: r.Fence} }

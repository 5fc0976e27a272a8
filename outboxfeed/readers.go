package outboxfeed

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ReaderLiveWithin is how recently a Worker must have reported what it
// reads (ReaderRegistry.Heartbeat) to count as live: a row older than this
// is a Worker that stopped without saying so (killed, partitioned) and is
// ignored. A Worker reports on start, then every StatsInterval or every
// ReaderHeartbeat, whichever is shorter, and forgets its row on Stop.
const ReaderLiveWithin = time.Minute

// ReaderHeartbeat is the longest a Worker waits between two reports, a
// quarter of ReaderLiveWithin: three missed reports in a row leave it
// live.
const ReaderHeartbeat = ReaderLiveWithin / 4

// ErrIncompatibleReaders is wrapped by CheckReaders when a live Worker
// cannot read a (type, version).
var ErrIncompatibleReaders = errors.New("outboxfeed: live Workers cannot read the type")

// ReaderInfo is one running Worker and the pairs it reads.
type ReaderInfo struct {
	Handler string
	Owner   string
	// Reads lists the (type, version) pairs its catalogue lists, or
	// AnyType for a Worker without a catalogue.
	Reads     []TypeVersion
	StartedAt time.Time
	SeenAt    time.Time
}

// ReadsPair reports whether the Worker reads tv.
func (ri ReaderInfo) ReadsPair(tv TypeVersion) bool {
	return slices.Contains(ri.Reads, AnyType) || slices.Contains(ri.Reads, tv)
}

// ReaderRegistry is a store that records which (type, version) pairs each
// running Worker reads (the PostgreSQL store). A Worker over a store that
// is one reports on start, periodically and on Stop; over another store it
// reports nothing and `herald types check` cannot be run against it.
type ReaderRegistry interface {
	// Heartbeat records (or refreshes) that the Worker owner of handler
	// runs and reads reads.
	Heartbeat(ctx context.Context, handler, owner string, reads []TypeVersion) error
	// ForgetReader removes the Worker's row (it stopped).
	ForgetReader(ctx context.Context, handler, owner string) error
	// Readers lists the live Workers (seen within ReaderLiveWithin),
	// ordered by handler and owner.
	Readers(ctx context.Context) ([]ReaderInfo, error)
}

// CheckReaders returns nil when every live Worker in readers of every
// handler in handlers reads tv (every handler with a live Worker when
// handlers is empty), and otherwise an error wrapping
// ErrIncompatibleReaders that names each Worker that cannot. No live
// Worker at all is an error too: nothing would read the records.
func CheckReaders(readers []ReaderInfo, tv TypeVersion, handlers []string) error {
	var bad []string
	seen := map[string]int{}
	for _, r := range readers {
		if len(handlers) > 0 && !slices.Contains(handlers, r.Handler) {
			continue
		}
		seen[r.Handler]++
		if !r.ReadsPair(tv) {
			bad = append(bad, fmt.Sprintf("%s/%s (started %s)", r.Handler, r.Owner, r.StartedAt.UTC().Format(time.RFC3339)))
		}
	}
	var missing []string
	for _, h := range handlers {
		if seen[h] == 0 {
			missing = append(missing, h)
		}
	}
	switch {
	case len(bad) > 0:
		return fmt.Errorf("%w: %s: %d of the live Workers cannot read it: %s", ErrIncompatibleReaders, tv, len(bad), strings.Join(bad, ", "))
	case len(missing) > 0:
		return fmt.Errorf("%w: %s: no live Worker of handler %s", ErrIncompatibleReaders, tv, strings.Join(missing, ", "))
	case len(seen) == 0:
		return fmt.Errorf("%w: %s: no live Worker at all", ErrIncompatibleReaders, tv)
	}
	return nil
}

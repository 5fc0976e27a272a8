package outboxfeed

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// flowStore is a Store whose partitions always have two more records:
// every claim finds them (the lead lane's first a backlog, which kicks
// every lane), as when records flow faster than each lane claims. It
// counts the completions of the lanes other than the lead one.
type flowStore struct {
	mu     sync.Mutex
	held   map[int]bool
	seq    int64
	first  bool
	done   chan struct{} // closed once the lead lane completed 2 × leadWant batches and another lane one
	lead   int
	kept   int // the lead lane's completions that went on with their partition
	spare  int // the other lanes' completions
	chains int // of which carried the claim of the next batch
	// lateChains are the chains after the lead lane's first leadWant
	// completions, long after its backlog (its first batch) ended.
	lateChains int
}

const leadWant = 50

func newFlowStore() *flowStore {
	return &flowStore{held: map[int]bool{}, first: true, done: make(chan struct{})}
}

// next claims a free partition's next record for req (nil when every
// partition is held); s.mu is held.
func (s *flowStore) next(req ClaimRequest) *Batch {
	part := req.Partition
	if part == AnyPartition {
		for part = 0; s.held[part]; part++ {
		}
	}
	if s.held[part] {
		return nil
	}
	s.held[part] = true
	var recs []Record
	for range 2 {
		s.seq++
		recs = append(recs, Record{ID: "r" + strconv.FormatInt(s.seq, 10), Seq: s.seq, TenantID: "acme", Channel: "c/" + strconv.FormatInt(s.seq, 10),
			Type: "order.updated", SchemaVersion: 1, Payload: []byte(`{}`), Freshness: []byte(`{"mode":"immediate"}`), OccurredAt: time.Now()})
	}
	// The lead lane's first claim finds a backlog.
	lead := !strings.Contains(req.Owner, "/")
	b := &Batch{Partition: part, Owner: req.Owner, Fence: s.seq, Records: recs, More: s.first && lead}
	s.first = s.first && !lead
	return b
}

// finished reports whether done is closed; s.mu is held.
func (s *flowStore) finished() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func (s *flowStore) Claim(_ context.Context, req ClaimRequest) (*Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.next(req), nil
}

func (s *flowStore) Complete(_ context.Context, b *Batch, _ []Outcome, next *ClaimRequest) (bool, *Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.held, b.Partition)
	if s.finished() {
		return true, nil, nil // the Worker is being stopped: nothing counts
	}
	if strings.Contains(b.Owner, "/") {
		s.spare++
		if next != nil {
			s.chains++
			if s.lead >= leadWant {
				s.lateChains++
			}
		}
	} else {
		if next != nil && next.Partition == b.Partition && !b.More {
			s.kept++
		}
		s.lead++
	}
	// Done once the lead lane completed 2 × leadWant batches and another
	// lane one (however the lanes' goroutines were scheduled).
	if s.lead >= 2*leadWant && s.spare > 0 {
		close(s.done)
	}
	if next == nil || s.finished() {
		return true, nil, nil
	}
	return true, s.next(*next), nil
}

// CompleteMany completes each batch as Complete does, then claims up to
// next.Spread of the four partitions.
func (s *flowStore) CompleteMany(ctx context.Context, cs []Completion, next *ClaimRequest) ([]bool, []*Batch, error) {
	held := make([]bool, len(cs))
	var nbs []*Batch
	for i, c := range cs {
		var n *ClaimRequest
		if c.GoOn && next != nil {
			r := *next
			r.Partition = c.Batch.Partition
			n = &r
		}
		h, nb, _ := s.Complete(ctx, c.Batch, c.Out, n)
		held[i] = h
		if nb != nil {
			nbs = append(nbs, nb)
		}
	}
	if next == nil {
		return held, nbs, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for range max(next.Spread, 1) {
		if s.lead >= 2*leadWant || len(s.held) >= 4 {
			break
		}
		nbs = append(nbs, s.next(*next))
	}
	return held, nbs, nil
}

func (s *flowStore) Renew(context.Context, *Batch, time.Duration) error { return nil }
func (s *flowStore) Migrate(context.Context) error                      { return nil }
func (s *flowStore) Get(context.Context, string) (Record, error)        { return Record{}, ErrNotFound }
func (s *flowStore) Stats(context.Context) (Stats, error)               { return Stats{}, nil }
func (s *flowStore) Ping(context.Context) error                         { return nil }
func (s *flowStore) Close() error                                       { return nil }

func (s *flowStore) Wakeups(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		<-ctx.Done()
		close(ch)
	}()
	return ch
}

type acceptAll struct{}

func (acceptAll) Deliver(context.Context, *Record) error { return nil }

// A Worker with a ClaimDelay keeps up with its lead lane: the other
// lanes, kicked by a backlog, complete their partial batches without
// claiming again (they wait for the next backlog), even though records
// keep coming, while the lead lane goes on claiming with each completion,
// each time the partition that waited longest. Without a ClaimDelay (the
// realtime handler) the lead lane stays with a partition that keeps
// receiving records, the other lanes go on while its claims find a
// backlog, and rest after batches below one once its claims find none
// (at most the claim each decided on before that, one a lane).
func TestSpareLanesRestAfterPartialBatches(t *testing.T) {
	for _, delay := range []time.Duration{time.Microsecond, 0} {
		s := newFlowStore()
		w, err := NewDeliveryWorker(s, acceptAll{}, WorkerConfig{Handler: "hooks", Owner: "o", Lanes: 4, BatchSize: 64,
			ClaimDelay: delay, PollInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-s.done:
		case <-time.After(time.Minute):
			t.Fatal("the lead lane did not complete its batches")
		}
		w.Stop()
		s.mu.Lock()
		spare, chains, kept, late := s.spare, s.chains, s.kept, s.lateChains
		s.mu.Unlock()
		switch {
		case delay > 0 && kept > 0:
			t.Fatalf("ClaimDelay %v: the lead lane went on with its partition after %d partial batches; want it to take the one that waited longest", delay, kept)
		case delay == 0 && kept == 0:
			t.Fatal("ClaimDelay 0: the lead lane never went on with a partition still receiving records")
		case spare == 0:
			t.Fatalf("ClaimDelay %v: the backlog brought no other lane in", delay)
		case delay > 0 && chains > 0:
			t.Fatalf("ClaimDelay %v: %d of the other lanes' %d completions claimed the next batch; want none", delay, chains, spare)
		case delay == 0 && late > 3:
			t.Fatalf("ClaimDelay 0: %d of the other lanes' completions claimed the next batch long after the lead lane's backlog ended; want at most one a lane", late)
		}
	}
}

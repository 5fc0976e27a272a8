package outboxfeed

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// paceStore is a Store whose lead lane finds one batch of partition 0 at
// each claim: a trickle (one record) or a backlog (More). It counts the
// lead lane's completions, and those that carried the next claim.
type paceStore struct {
	flowStore
	backlog bool
	mu      sync.Mutex
	seq     int64
	done    int // the lead lane's completions
	chained int // of which carried a claim
	chain   chan struct{}
}

func (s *paceStore) batch(req ClaimRequest) *Batch {
	if strings.Contains(req.Owner, "/") {
		return nil // the other lanes find nothing
	}
	s.seq++
	return &Batch{Partition: 0, Owner: req.Owner, Fence: s.seq, Records: []Record{oneRecord(s.seq)}, More: s.backlog}
}

// oneRecord is the record of sequence number seq, on channel c/1.
func oneRecord(seq int64) Record {
	return Record{ID: "r" + strconv.FormatInt(seq, 10), Seq: seq, TenantID: "acme", Channel: "c/1",
		Type: "order.updated", SchemaVersion: 1, Payload: []byte(`{}`), Freshness: []byte(`{"mode":"immediate"}`), OccurredAt: time.Now()}
}

// completeOne completes b (and claims next) through s's CompleteMany.
func completeOne(ctx context.Context, s Store, b *Batch, out []Outcome, next *ClaimRequest) (bool, *Batch, error) {
	_, nbs, err := s.CompleteMany(ctx, []Completion{{Batch: b, Out: out}}, next)
	if len(nbs) == 0 {
		return true, nil, err
	}
	return true, nbs[0], err
}

// allHeld is what a store answers for n completions whose leases held.
func allHeld(n int) []bool {
	held := make([]bool, n)
	for i := range held {
		held[i] = true
	}
	return held
}

func (s *paceStore) Claim(_ context.Context, req ClaimRequest) (*Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.batch(req), nil
}

func (s *paceStore) Complete(ctx context.Context, b *Batch, out []Outcome, next *ClaimRequest) (bool, *Batch, error) {
	return completeOne(ctx, s, b, out, next)
}

func (s *paceStore) CompleteMany(_ context.Context, cs []Completion, next *ClaimRequest) ([]bool, []*Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	held := allHeld(len(cs))
	if len(cs) == 0 || strings.Contains(cs[0].Batch.Owner, "/") {
		return held, nil, nil
	}
	s.done++
	if next == nil {
		return held, nil, nil
	}
	s.chained++
	signal(s.chain)
	return held, []*Batch{s.batch(*next)}, nil
}

// signalDeliver signals each delivery.
type signalDeliver chan struct{}

func (d signalDeliver) Deliver(context.Context, *Record) error {
	signal(d)
	return nil
}

// The lead lane's claim after one that found a trickle (fewer records
// than a backlog) waits for CycleInterval, and a stop ends the wait (the
// batch is completed without a claim); after one that found a backlog it
// claims again at once, however long the CycleInterval.
func TestCycleIntervalPacesATrickleNotABacklog(t *testing.T) {
	for _, lanes := range []int{1, 4} {
		for _, backlog := range []bool{false, true} {
			s := &paceStore{backlog: backlog, chain: make(chan struct{}, 1)}
			delivered := make(signalDeliver, 1)
			w, err := NewDeliveryWorker(s, delivered, WorkerConfig{Handler: "hooks", Owner: "o", Lanes: lanes,
				PollInterval: time.Hour, IdleAfter: time.Hour, CycleInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			if backlog {
				// Each completion claims the next batch: wait for a few.
				for range 5 {
					select {
					case <-s.chain:
					case <-time.After(time.Minute):
						t.Fatalf("lanes %d: the lead lane did not claim again after a backlog", lanes)
					}
				}
				w.Stop()
				continue
			}
			select {
			case <-delivered:
			case <-time.After(time.Minute):
				t.Fatalf("lanes %d: the first batch was not delivered", lanes)
			}
			// The lane now waits (an hour) before it completes the batch
			// with the next claim; the stop ends the wait.
			w.Stop()
			s.mu.Lock()
			done, chained := s.done, s.chained
			s.mu.Unlock()
			if done != 1 || chained != 0 {
				t.Fatalf("lanes %d: a trickle's batch: %d completions, %d of them with a claim; want 1 without", lanes, done, chained)
			}
		}
	}
}

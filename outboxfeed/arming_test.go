package outboxfeed

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// armStore is a Store with a wake-up trigger whose lead lane's claims
// find, one claim after another, the records script says (1 or 0: an
// empty claim), and nothing once the script is done. It logs what each of
// the lead lane's claims did to the trigger; the other lanes find nothing.
type armStore struct {
	flowStore
	mu     sync.Mutex
	script []int
	seq    int64
	reqs   []ClaimRequest // the lead lane's claims, in order
	armed  chan struct{}  // signalled when a claim arms after busyStreak claims
}

func (s *armStore) ArmsWakeups() bool { return true }

// claim logs req and returns its batch; s.mu is held.
func (s *armStore) claim(req ClaimRequest) *Batch {
	if strings.Contains(req.Owner, "/") {
		return nil
	}
	i := len(s.reqs)
	s.reqs = append(s.reqs, req)
	if req.Arm > 0 && i > busyStreak {
		signal(s.armed)
	}
	if i >= len(s.script) || s.script[i] == 0 {
		return nil
	}
	s.seq++
	return &Batch{Partition: 0, Owner: req.Owner, Fence: s.seq, Records: []Record{oneRecord(s.seq)}}
}

func (s *armStore) Claim(_ context.Context, req ClaimRequest) (*Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.claim(req), nil
}

func (s *armStore) Complete(ctx context.Context, b *Batch, out []Outcome, next *ClaimRequest) (bool, *Batch, error) {
	return completeOne(ctx, s, b, out, next)
}

func (s *armStore) CompleteMany(_ context.Context, cs []Completion, next *ClaimRequest) ([]bool, []*Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	held := allHeld(len(cs))
	if next == nil {
		return held, nil, nil
	}
	if b := s.claim(*next); b != nil {
		return held, []*Batch{b}, nil
	}
	return held, nil, nil
}

// The lead lane disarms the wake-up trigger once busyStreak claims in a
// row found records, and keeps it disarmed through an empty claim, and
// fewer than quietClaims in a row, in the middle of the flow: producers
// then pay for no NOTIFY while records flow. Once quietClaims claims in a
// row found nothing (the flow stopped), the next claim arms it again.
func TestLeadLaneArmsOnlyAfterTheFlowStops(t *testing.T) {
	ones := func(n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = 1
		}
		return s
	}
	var script []int
	script = append(script, ones(busyStreak+4)...)
	script = append(script, 0) // one empty claim mid-flow
	script = append(script, ones(4)...)
	for range quietClaims - 1 { // as many in a row as do not end the flow
		script = append(script, 0)
	}
	script = append(script, ones(4)...)
	end := len(script) // the first claim of the stopped flow
	for _, lanes := range []int{1, 4} {
		s := &armStore{script: script, armed: make(chan struct{}, 1)}
		w, err := NewDeliveryWorker(s, acceptAll{}, WorkerConfig{Handler: "hooks", Owner: "o", Lanes: lanes,
			PollInterval: time.Hour, IdleAfter: time.Hour, ActivePollInterval: time.Microsecond, CycleInterval: time.Microsecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-s.armed:
		case <-time.After(time.Minute):
			t.Fatalf("lanes %d: the lead lane did not arm the trigger again", lanes)
		}
		w.Stop()
		s.mu.Lock()
		reqs := s.reqs
		s.mu.Unlock()
		for i, req := range reqs {
			var want string
			switch {
			case i == 0:
				want = "arm" // the lane starts waiting for wake-ups
			case i == busyStreak:
				want = "disarm" // busyStreak claims in a row found records
			case i == end+quietClaims:
				want = "arm" // quietClaims claims in a row found none
			case i > end+quietClaims:
				continue // looks after arming
			}
			var got string
			switch {
			case req.Disarm:
				got = "disarm"
			case req.Arm > 0:
				got = "arm"
			}
			if got != want {
				t.Fatalf("lanes %d: claim %d (of a script of %d, then nothing): %q, want %q (script %v)", lanes, i, end, got, want, script)
			}
		}
	}
}

// The streak of claims that found records restarts after a pause in the
// flow (an empty claim, and flowGap between the claims that found records
// around it), not after an empty claim soon followed by records (a
// wake-up whose record the last claim took), nor after a slow claim.
func TestFlowPauseRestartsTheStreak(t *testing.T) {
	w, err := NewDeliveryWorker(&armStore{}, acceptAll{}, WorkerConfig{Handler: "hooks", Owner: "o",
		PollInterval: time.Hour, IdleAfter: time.Hour, CycleInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		quiet  int
		before time.Duration // the last claim that found records, this long ago
		want   int
	}{
		{"an empty claim within the flow", 1, 0, busyStreak},
		{"quietClaims-1 empty claims within the flow", quietClaims - 1, 0, busyStreak},
		{"a slow claim", 0, 2 * w.flowGap(), busyStreak},
		{"an empty claim after a pause", 1, 2 * w.flowGap(), 1},
	} {
		l := &lane{lead: true, streak: busyStreak - 1, quiet: c.quiet, foundAt: time.Now().Add(-c.before)}
		w.found(l)
		if l.streak != c.want || l.quiet != 0 || l.polling != (c.want >= busyStreak) {
			t.Errorf("%s: streak %d, quiet %d, polling %v; want streak %d", c.name, l.streak, l.quiet, l.polling, c.want)
		}
	}
}

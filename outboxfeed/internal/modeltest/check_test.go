package modeltest

// The end of a run of the model-based test (doc.go): settling and
// checking the channel histories against the model.

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/outboxfeed"
)

// ---- The end

// committedRecs lists the records the store holds for good.
func (m *modelRun) committedRecs() []*mRec {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*mRec
	for _, r := range m.recs {
		if r.committed() {
			out = append(out, r)
		}
	}
	return out
}

// settle replays dead letters until every committed record is in the
// history and the store's backlog is gone, or until nothing moved for
// the stall bound; it returns the records still missing then.
func (m *modelRun) settle() []*mRec {
	want := m.committedRecs()
	last, lastMove := -1, time.Now()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		sig := m.b.sig.c()
		m.b.mu.Lock()
		var missing []*mRec
		for _, r := range want {
			if m.b.copies[r.id] == 0 {
				missing = append(missing, r)
			}
		}
		moved := m.b.appended
		m.b.mu.Unlock()
		m.mu.Lock()
		moved += m.replays
		m.mu.Unlock()
		if len(missing) == 0 {
			st, err := m.be.adminStore.Stats(m.ctx)
			if err == nil && st.Pending == 0 && st.DeadLetter == 0 {
				if c, err := m.changing(); err == nil && !c {
					m.logf("settled: every committed record delivered, no backlog")
					return nil
				}
			}
		}
		if moved != last {
			last, lastMove = moved, time.Now()
		}
		if time.Since(lastMove) > m.plan.stall {
			m.logf("stuck: %d of %d committed records missing, nothing delivered for %v", len(missing), len(want), m.plan.stall)
			return missing
		}
		select {
		case <-sig:
		case <-tick.C:
			m.replay()
		}
	}
}

// check compares the histories with the model.
func (m *modelRun) check(missing []*mRec) {
	t := m.t
	seed := m.plan.seed
	committed := m.committedRecs()
	m.mu.Lock()
	all := append([]*mRec(nil), m.recs...)
	notified := m.notified
	m.mu.Unlock()
	m.b.mu.Lock()
	defer m.b.mu.Unlock()
	t.Logf("model on %s, seed %d: %d records staged, %d committed, %d publications appended, %d lost answers, %d replays, %d prepared transactions refused (NOTIFY)",
		m.plan.caps.store, seed, len(all), len(committed), m.b.appended, len(m.b.lost), m.replays, notified)

	// Delivered: every committed record, never another one.
	if len(missing) > 0 {
		ids := make([]string, len(missing))
		for i, r := range missing {
			ids[i] = r.id
		}
		diag, err := m.be.diagnose(context.Background(), ids)
		if err != nil {
			t.Errorf("model: diagnose: %v", err)
		}
		var lines []string
		for i, r := range missing {
			if i == 20 {
				lines = append(lines, fmt.Sprintf("… and %d more", len(missing)-20))
				break
			}
			h, _ := m.hint(r, diag[r.id])
			lines = append(lines, fmt.Sprintf("  %s %v (tx %d #%d, fate %s, staged at %d, committed at %d, replayed %v): %s",
				r.id, r.key, r.tx.n, r.idx, r.fate, r.stageTick, r.tx.commitTick, m.b.replayed[r.id], h))
		}
		kinds := map[string]int{}
		for _, r := range missing {
			_, k := m.hint(r, diag[r.id])
			kinds[k]++
		}
		lines = append([]string{fmt.Sprintf("  causes: %v", kinds)}, lines...)
		perKey := map[fanout.Key]int{}
		for _, r := range missing {
			perKey[r.key]++
		}
		t.Errorf("model: seed %d: STUCK or LOST: %d committed records never delivered (per channel %v):\n%s",
			seed, len(missing), perKey, strings.Join(lines, "\n"))
	}
	for key, ids := range m.b.hist {
		for _, id := range ids {
			r := m.byIDLocked(id)
			switch {
			case r == nil:
				t.Errorf("model: seed %d: %v: published %s, which no producer staged", seed, key, id)
			case !r.committed():
				t.Errorf("model: seed %d: %v: published %s, which was rolled back (tx %d, savepoint undone %v)", seed, key, id, r.tx.n, r.undone)
			}
		}
	}

	// Exactly once, outside the documented duplicates.
	dups := 0
	for _, r := range committed {
		allowed := 1 + m.b.lost[r.id] + m.extra[r.id]
		if c := m.b.copies[r.id]; c > allowed {
			if dups++; dups <= 10 {
				var acc []string
				for _, a := range m.b.accepts[r.id] {
					acc = append(acc, fmt.Sprintf("offset %d by %s (%s fence %d, takeover %v)%s", a.offset, a.worker, a.fence.Scope, a.fence.Value, a.fence.Takeover, a.lostNote))
				}
				t.Errorf("model: seed %d: DUPLICATE: %s %v (fate %s) is in the history %d times, %d allowed (lost answers %d, replays of a published record %d): %s",
					seed, r.id, r.key, r.fate, c, allowed, m.b.lost[r.id], m.extra[r.id], strings.Join(acc, "; "))
			}
		}
	}
	if dups > 10 {
		t.Errorf("model: seed %d: … %d duplicated records in all", seed, dups)
	}

	m.checkOrder()
	if len(missing) > 0 {
		return
	}

	// Nothing stuck in the store.
	ctx := context.Background()
	st, err := m.be.admin.Stats(ctx)
	if err != nil {
		t.Errorf("model: admin stats: %v", err)
		return
	}
	if st.States[outboxfeed.StateDispatched] != int64(len(committed)) || st.States[outboxfeed.StatePending] != 0 ||
		st.States[outboxfeed.StateProcessing] != 0 || st.States[outboxfeed.StateDeadLetter] != 0 {
		t.Errorf("model: seed %d: the store ends with %v, want all %d committed records dispatched", seed, st.States, len(committed))
	}
}

// hint says what the store holds of a missing record, and which known
// defect that looks like. Caller holds m.b.mu.
func (m *modelRun) hint(r *mRec, d modelDiag) (string, string) {
	if d.state == "" {
		return "LOST: the store has no such record", "not in the store"
	}
	s := fmt.Sprintf("%s in partition %d (%s), in the retry queue %v (its channel queues %d there), attempt %d",
		d.state, d.part, d.partState, d.queued, d.chQueued, d.attempt)
	if d.lastErr != "" {
		s += fmt.Sprintf(", last error %q", d.lastErr)
	}
	minBatch, who := math.MaxInt, ""
	for _, w := range m.workers {
		if w.plan.batch < minBatch {
			minBatch, who = w.plan.batch, w.name
		}
	}
	switch {
	case d.partState == "retired" && m.b.replayed[r.id]:
		return s + " — a replayed dead letter kept the partition it had before a partition-count change, which retired: no claim reads it",
			"replayed dead letter in a retired partition"
	case d.partState == "retired":
		return s + " — in a retired partition that no claim reads: staged while the partition count changed, its transaction still open when the partition retired",
			"record in a retired partition"
	case d.chQueued > minBatch:
		return s + fmt.Sprintf(" — its channel holds more records in the retry queue than a batch of %s (%d): a channel whose held records exceed one batch is held forever", who, minBatch),
			"channel holding more than a batch in the retry queue"
	case d.partState == "waiting":
		return s + " — in a partition waiting for a partition-count change to complete", "waiting for a partition-count change"
	}
	return s, "other"
}

func (m *modelRun) byIDLocked(id string) *mRec {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.byID[id]
}

// checkOrder checks each channel's history (first copies) against the
// order docs/delivery.md promises. Caller holds m.b.mu.
func (m *modelRun) checkOrder() {
	seed := m.plan.seed
	bad := 0
	reported := map[[2]*mTx]bool{}
	for key, ids := range m.b.hist {
		var seq []*mRec
		seen := map[string]bool{}
		for _, id := range ids {
			r := m.byIDLocked(id)
			if r == nil || seen[id] || !r.committed() {
				continue
			}
			seen[id] = true
			m.mu.Lock()
			_, dead := m.deadSeen[id]
			m.mu.Unlock()
			if dead || r.fate.deadLetters() {
				continue // replayed: published after its channel moved on
			}
			seq = append(seq, r)
		}
		// A record staged after another's transaction committed follows
		// it: for each position, no later record committed before it was
		// staged. Records of one transaction: staging order.
		for i := range seq {
			for j := i + 1; j < len(seq); j++ {
				a, b := seq[i], seq[j] // a was published first
				var why string
				switch {
				case a.tx == b.tx && a.idx > b.idx:
					why = fmt.Sprintf("both of transaction %d, staged as #%d then #%d", a.tx.n, b.idx, a.idx)
				case a.tx != b.tx && a.stageTick > b.tx.commitTick:
					why = fmt.Sprintf("%s was staged (at %d) after %s's transaction %d committed (at %d)", a.id, a.stageTick, b.id, b.tx.n, b.tx.commitTick)
					if a.tx.firstWrite < b.tx.commitTick {
						why += fmt.Sprintf("; %s's transaction %d had written before that (at %d, business row %v): the claim orders by the xid a transaction gets at its first write, not by staging",
							a.id, a.tx.n, a.tx.firstWrite, a.tx.business)
					}
				default:
					continue
				}
				pair := [2]*mTx{a.tx, b.tx}
				if reported[pair] {
					continue
				}
				reported[pair] = true
				if bad++; bad <= 10 {
					m.t.Errorf("model: seed %d: ORDER: %v: %s (tx %d) was published before %s (tx %d): %s",
						seed, key, a.id, a.tx.n, b.id, b.tx.n, why)
				}
			}
		}
	}
	if bad > 10 {
		m.t.Errorf("model: seed %d: … %d pairs of transactions out of order in all", seed, bad)
	}
}

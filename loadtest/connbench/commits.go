package main

import (
	"sync/atomic"
	"time"
)

// commitPageSize is how many COMMIT times one page of the log holds.
const commitPageSize = 1 << 14

type commitPage [commitPageSize]atomic.Int64

// timeLog is a Unix ns time per sequence number. Pages are allocated as
// the run reaches them, so a long run's log costs 8 bytes per publication
// made, not per publication planned.
type timeLog struct {
	pages []atomic.Pointer[commitPage]
}

func newTimeLog(publications int) timeLog {
	return timeLog{pages: make([]atomic.Pointer[commitPage], (publications+commitPageSize-1)/commitPageSize)}
}

// setNs records ns under seq; a seq beyond the run is ignored.
func (l *timeLog) setNs(seq uint64, ns int64) {
	i := seq / commitPageSize
	if i >= uint64(len(l.pages)) {
		return
	}
	pg := l.pages[i].Load()
	if pg == nil {
		pg = new(commitPage)
		if !l.pages[i].CompareAndSwap(nil, pg) {
			pg = l.pages[i].Load()
		}
	}
	pg[seq%commitPageSize].Store(ns)
}

// at is the time recorded under seq, in Unix ns; 0 = none (yet).
func (l *timeLog) at(seq uint64) int64 {
	i := seq / commitPageSize
	if i >= uint64(len(l.pages)) {
		return 0
	}
	pg := l.pages[i].Load()
	if pg == nil {
		return 0
	}
	return pg[seq%commitPageSize].Load()
}

// commitLog is the outbox publisher's record of when each publication's
// COMMIT returned, by sequence number (a timeLog), and the commit → client
// latency the subscribers measure against it.
type commitLog struct {
	timeLog

	lat    histogram    // COMMIT returned → subscriber read the publication
	before atomic.Int64 // deliveries read before their COMMIT returned (recorded as 0)
	last   atomic.Int64 // Unix ns of the latest delivery observed
}

func newCommitLog(publications int) *commitLog {
	return &commitLog{timeLog: newTimeLog(publications)}
}

// set records that seq's COMMIT returned at t.
func (l *commitLog) set(seq uint64, t time.Time) { l.setNs(seq, t.UnixNano()) }

// observe records the commit → client latency of publication seq, read by
// s at recv. A COMMIT not yet recorded is looked at again once the run
// ends (settle): the delivery may have overtaken the producer's COMMIT
// reply.
func (l *commitLog) observe(s *subscriber, seq uint64, recv time.Time) {
	storeMax(&l.last, recv.UnixNano())
	if c := l.at(seq); c != 0 {
		l.record(recv.UnixNano() - c)
		return
	}
	s.early = append(s.early, early{seq: seq, recv: recv.UnixNano()})
}

// settle records the deliveries s read before their COMMIT time was
// known, once the publisher and s's reader have returned. One whose COMMIT
// never returned successfully is not a measured publication (the delivery
// check counts it as never published).
func (l *commitLog) settle(s *subscriber) {
	for _, e := range s.early {
		if c := l.at(e.seq); c != 0 {
			l.record(e.recv - c)
		}
	}
	s.early = nil
}

// record adds one latency; a delivery read before its COMMIT returned
// counts as 0 and is counted apart.
func (l *commitLog) record(ns int64) {
	if ns < 0 {
		l.before.Add(1)
		ns = 0
	}
	l.lat.record(time.Duration(ns))
}

// storeMax raises a to v if v is greater.
func storeMax(a *atomic.Int64, v int64) {
	for {
		prev := a.Load()
		if v <= prev || a.CompareAndSwap(prev, v) {
			return
		}
	}
}

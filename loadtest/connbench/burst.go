package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// burstInfo is what a -burst run measured on the publisher's side: when
// the burst's transactions committed. The last delivery is the commit
// log's (commitLog.last).
type burstInfo struct {
	txs         int
	firstCommit time.Time // the first COMMIT sent
	lastCommit  time.Time // the last COMMIT returned
}

// runBurst stages n publications round-robin over the channels in one
// transaction per producer (producer w stages k = w, w+workers, …), waits
// until every transaction has staged its share, then commits them all at
// once: a burst of committed records the server's consumer finds together,
// as after a batch job. The staging is not timed; the drain is, from the
// first COMMIT to the last delivery.
func (p *outboxPublisher) runBurst(ctx context.Context, n int, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var (
		staged sync.WaitGroup
		done   sync.WaitGroup
		commit = make(chan struct{})
		failed atomic.Bool
		first  atomic.Int64
		last   atomic.Int64
	)
	staged.Add(p.workers)
	for w := range p.workers {
		done.Go(func() {
			committed, ks, err := p.stageBurst(ctx, w, n, &staged, commit, &first)
			if err != nil {
				failed.Store(true)
				return
			}
			storeMax(&last, committed.UnixNano())
			p.mu.Lock()
			for _, k := range ks {
				p.accept(k%len(p.channels), uint64(k))
			}
			p.mu.Unlock()
		})
	}
	staged.Wait()
	if p.beforeCommit != nil {
		p.beforeCommit()
	}
	close(commit)
	done.Wait()
	p.burst = burstInfo{txs: p.workers, firstCommit: time.Unix(0, first.Load()), lastCommit: time.Unix(0, last.Load())}
	p.mu.Lock()
	p.sent = n
	p.mu.Unlock()
	if failed.Load() {
		return fmt.Errorf("connbench: burst: a transaction failed: %v", p.errs)
	}
	return nil
}

// stageBurst is producer w's transaction of a burst: BEGIN, its share of
// the n publications, then (once every producer has staged, commit is
// closed) COMMIT. It records the COMMIT time of each of its publications
// and returns it with their sequence numbers.
func (p *outboxPublisher) stageBurst(ctx context.Context, w, n int, staged *sync.WaitGroup, commit <-chan struct{}, first *atomic.Int64) (time.Time, []int, error) {
	stagedOnce := sync.OnceFunc(staged.Done)
	defer stagedOnce() // a failed producer must not hold the others
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		p.fail("begin", err)
		return time.Time{}, nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var b stageBufs
	var ks []int
	for k := w; k < n; k += p.workers {
		if err := p.stageOne(ctx, tx, k, time.Now(), &b); err != nil {
			return time.Time{}, nil, err
		}
		ks = append(ks, k)
	}
	stagedOnce()
	select {
	case <-commit:
	case <-ctx.Done():
		return time.Time{}, nil, ctx.Err()
	}
	first.CompareAndSwap(0, time.Now().UnixNano())
	if err := tx.Commit(ctx); err != nil {
		p.fail("commit", err)
		return time.Time{}, nil, err
	}
	committed := time.Now()
	for _, k := range ks {
		p.commits.set(uint64(k), committed)
	}
	return committed, ks, nil
}

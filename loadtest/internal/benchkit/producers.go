package benchkit

import (
	"context"
	"sync"
	"time"
)

// Paced hands the numbers 0 … total−1 to workers goroutines on a fixed
// schedule of rate numbers per second (k is due k/rate after the start),
// until all are handed out or ctx ends, and collects what one returns for
// each. A worker whose one fails skips the numbers it gets after that.
//
// It returns the results (worker by worker, each in the order it ran
// them), how far the schedule fell behind at most, and the first failing
// worker's error, else ctx.Err().
func Paced[M any](ctx context.Context, rate, workers, total int, one func(k int) (M, error)) ([]M, time.Duration, error) {
	jobs := make(chan int, rate)
	results := make([][]M, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for k := range jobs {
				if errs[w] != nil {
					continue
				}
				m, err := one(k)
				if err != nil {
					errs[w] = err
					continue
				}
				results[w] = append(results[w], m)
			}
		})
	}
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	var lag time.Duration
	for k := 0; k < total && ctx.Err() == nil; k++ {
		due := start.Add(time.Duration(k) * interval)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		} else {
			lag = max(lag, -d)
		}
		jobs <- k
	}
	close(jobs)
	wg.Wait()
	var out []M
	for w := range results {
		if errs[w] != nil {
			return nil, lag, errs[w]
		}
		out = append(out, results[w]...)
	}
	return out, lag, ctx.Err()
}

// Unpaced runs producers goroutines, each calling one(w, i) for its
// i-th transaction (w is the producer, from 0) as fast as it can until
// d has passed since the start, and collects the times one reports:
// the whole transaction and its COMMIT alone. one should not bind its
// transaction to the deadline, so the last one completes.
//
// It returns those times (producer by producer, each in its order), how
// long the producers ran, and the first failing producer's error (a
// producer stops at its first error).
func Unpaced(ctx context.Context, producers int, d time.Duration, one func(w, i int) (tx, commit time.Duration, err error)) (txs, commits []time.Duration, elapsed time.Duration, err error) {
	txByW := make([][]time.Duration, producers)
	commitByW := make([][]time.Duration, producers)
	errs := make([]error, producers)
	runCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	for w := range producers {
		wg.Go(func() {
			for i := 0; runCtx.Err() == nil; i++ {
				tx, commit, err := one(w, i)
				if err != nil {
					errs[w] = err
					return
				}
				txByW[w] = append(txByW[w], tx)
				commitByW[w] = append(commitByW[w], commit)
			}
		})
	}
	wg.Wait()
	elapsed = time.Since(start)
	for w := range producers {
		if errs[w] != nil {
			return nil, nil, elapsed, errs[w]
		}
		txs = append(txs, txByW[w]...)
		commits = append(commits, commitByW[w]...)
	}
	return txs, commits, elapsed, nil
}

package main

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
)

// cpuTimes is CPU time used so far by this process and by the PostgreSQL
// backends serving the benchmark's database (benchkit.Backends).
type cpuTimes struct {
	self     time.Duration
	backends benchkit.Backends
}

// readCPU reads the CPU times of this process and of pool's database's
// backends.
func readCPU(ctx context.Context, pool *pgxpool.Pool) cpuTimes {
	return cpuTimes{self: benchkit.SelfCPU(), backends: benchkit.ReadBackends(ctx, pool)}
}

// cpuSpent is CPU time spent between two readings.
type cpuSpent struct {
	self, postgres time.Duration
}

// since is what was spent from start to c.
func (c cpuTimes) since(start cpuTimes) cpuSpent {
	return cpuSpent{self: c.self - start.self, postgres: c.backends.Since(start.backends)}
}

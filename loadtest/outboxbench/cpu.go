package main

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
)

// cpuTimes is CPU time used so far by this process and by the PostgreSQL
// backends serving the benchmark's database (when the server runs on this
// machine and /proc shows them): other databases' work on a shared server
// is not counted, nor are the server's shared processes (WAL writer,
// checkpointer), which do work for everyone.
type cpuTimes struct {
	self     time.Duration
	postgres time.Duration
	backends map[int]time.Duration // per backend pid, to subtract at the end
}

// readCPU reads the CPU times; pool names the database whose backends
// count (nil: every postgres process).
func readCPU(ctx context.Context, pool *pgxpool.Pool) cpuTimes {
	c := cpuTimes{self: benchkit.SelfCPU()}
	if pool == nil {
		c.postgres = benchkit.PostgresCPU()
		return c
	}
	c.backends = map[int]time.Duration{}
	rows, err := pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		return c
	}
	defer rows.Close()
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) == nil {
			d, _ := benchkit.ProcCPU(pid) // 0 when it is gone
			c.backends[pid] = d
			c.postgres += d
		}
	}
	return c
}

// since is c − start; a backend that started after start counts whole.
func (c cpuTimes) since(start cpuTimes) cpuTimes {
	out := cpuTimes{self: c.self - start.self, postgres: c.postgres - start.postgres}
	if c.backends != nil {
		out.postgres = 0
		for pid, d := range c.backends {
			out.postgres += d - start.backends[pid]
		}
	}
	return out
}

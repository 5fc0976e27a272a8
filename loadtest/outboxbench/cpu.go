package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
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
	var c cpuTimes
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		c.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if pool == nil {
		c.postgres = postgresCPU()
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
			d := procCPU(pid)
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

// procCPU is utime+stime of process pid (0 when it is gone).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return 0
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * time.Second / 100 // USER_HZ
}

// postgresCPU sums utime+stime of the processes whose command is
// "postgres" (the server and its backends; a backend that exited during
// the measurement is missed).
func postgresCPU() time.Duration {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	const ticksPerSecond = 100 // USER_HZ on Linux
	var ticks int64
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open || s[open+1:end] != "postgres" {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + st
	}
	return time.Duration(ticks) * time.Second / ticksPerSecond
}

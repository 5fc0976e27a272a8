package benchkit

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

const ticksPerSecond = 100 // USER_HZ on Linux

// ParseStat reads the command name and utime+stime of a /proc/<pid>/stat
// line.
func ParseStat(s string) (comm string, cpu time.Duration, err error) {
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return "", 0, errors.New("benchkit: malformed stat line")
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 13 {
		return "", 0, errors.New("benchkit: short stat line")
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return "", 0, errors.New("benchkit: bad stat times")
	}
	return s[open+1 : end], time.Duration(u+st) * time.Second / ticksPerSecond, nil
}

// ProcCPU is the CPU time (utime+stime) of process pid, from
// /proc/<pid>/stat; an error when it is gone.
func ProcCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	_, d, err := ParseStat(string(b))
	return d, err
}

// PostgresCPU sums utime+stime of the processes whose command is
// "postgres": the server and its backends (a backend that exited during
// a measurement is missed), when the server runs on this machine.
func PostgresCPU() time.Duration {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var total time.Duration
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		comm, d, err := ParseStat(string(b))
		if err != nil || comm != "postgres" {
			continue
		}
		total += d
	}
	return total
}

// SelfCPU is this process's CPU time (user + system); 0 when getrusage
// fails.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Backends is the CPU time used so far by each PostgreSQL backend serving
// one database, by pid: what the work of a benchmark's own connections
// costs the server, without other databases' work on a shared server nor
// the server's shared processes (WAL writer, checkpointer), which both
// sides of a comparison leave out alike.
type Backends map[int]time.Duration

// ReadBackends reads the CPU time of the backends of pool's database.
func ReadBackends(ctx context.Context, pool *pgxpool.Pool) Backends {
	return ReadAppBackends(ctx, pool, "")
}

// ReadAppBackends reads the CPU time of the backends of pool's database
// whose application_name is app (any, when app is empty): the Worker's
// own connections apart from the producers', say.
func ReadAppBackends(ctx context.Context, pool *pgxpool.Pool, app string) Backends {
	b := Backends{}
	rows, err := pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()
		AND ($1 = '' OR application_name = $1)`, app)
	if err != nil {
		return b
	}
	defer rows.Close()
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) == nil {
			if d, err := ProcCPU(pid); err == nil {
				b[pid] = d
			}
		}
	}
	return b
}

// Since is the CPU time the backends of b used after start; a backend
// that started meanwhile counts whole, one that ended is missed.
func (b Backends) Since(start Backends) time.Duration {
	var d time.Duration
	for pid, t := range b {
		d += t - start[pid]
	}
	return d
}

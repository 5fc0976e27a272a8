package benchkit

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
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

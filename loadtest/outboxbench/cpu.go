package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuTimes is CPU time used so far by this process and by the PostgreSQL
// server's processes (when the server runs on this machine and /proc shows
// them; zero otherwise).
type cpuTimes struct {
	self     time.Duration
	postgres time.Duration
}

func readCPU() cpuTimes {
	var c cpuTimes
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		c.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	c.postgres = postgresCPU()
	return c
}

func (c cpuTimes) since(start cpuTimes) cpuTimes {
	return cpuTimes{self: c.self - start.self, postgres: c.postgres - start.postgres}
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

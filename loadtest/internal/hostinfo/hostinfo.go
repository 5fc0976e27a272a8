// Package hostinfo describes the machine a benchmark ran on, for its
// report: load average, CPUs and memory, read from /proc (Linux; other
// systems get "unknown").
package hostinfo

import (
	"fmt"
	"os"
	"runtime"
	"strings"
)

// LoadAvg is the 1/5/15-minute load average, "a / b / c".
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " / ")
}

// MemTotal is the machine's memory, in GiB ("23 GiB").
func MemTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "unknown"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err == nil {
				return fmt.Sprintf("%.0f GiB", float64(kb)/(1<<20))
			}
		}
	}
	return "unknown"
}

// CPUModel is the first CPU's model name.
func CPUModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// Machine is one line: CPUs, model, memory, OS/architecture and Go.
func Machine() string {
	return fmt.Sprintf("%d × %s, %s RAM, %s/%s, %s", runtime.NumCPU(), CPUModel(), MemTotal(),
		runtime.GOOS, runtime.GOARCH, runtime.Version())
}

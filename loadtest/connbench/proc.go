package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
)

// procRSS reads VmRSS of pid from /proc/<pid>/status, in bytes.
func procRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("connbench: read RSS: %w", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err != nil {
				return 0, fmt.Errorf("connbench: parse VmRSS %q: %w", rest, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("connbench: no VmRSS in /proc/%d/status", pid)
}

// raiseNoFile raises the soft open-file limit to the hard one and returns
// it. A child started afterwards inherits the raised limit (calling
// Setrlimit ourselves also stops os/exec from restoring the original soft
// limit in children).
func raiseNoFile() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("connbench: getrlimit: %w", err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("connbench: setrlimit: %w", err)
	}
	return lim.Cur, nil
}

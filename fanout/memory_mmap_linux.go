package fanout

import (
	"bytes"
	"os"
	"syscall"
)

// HistoryLogSupported reports whether this system can keep a history log:
// it needs shared file mappings and a boot id (Linux).
const HistoryLogSupported = true

// mapFile reserves size bytes of disk for f (so that writing through the
// mapping cannot fail for want of space) and maps it shared: what is
// copied into the mapping is in the page cache at once, and survives the
// process however it ends.
func mapFile(f *os.File, size int) ([]byte, error) {
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, int64(size)); err != nil {
		return nil, err
	}
	return syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
}

func unmapFile(m []byte) error { return syscall.Munmap(m) }

// bootID names this boot of the machine: the page cache of a killed
// process's files survives until the machine restarts, not after.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return string(bytes.TrimSpace(b))
}

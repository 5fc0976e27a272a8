//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// lockFileName is the file in a data directory whose lock the one process
// consuming the embedded store holds, with that process's PID in it.
const lockFileName = "herald.lock"

// lockWait is how long lockDataDir waits for a lock held only briefly
// (consumerActive's probe) before it takes the lock for taken.
const lockWait = 500 * time.Millisecond

// dataDirLock is a process's consumer lock on its data directory, held
// until release (or the process's end: the kernel drops it).
type dataDirLock struct{ f *os.File }

// lockDataDir takes the consumer lock on dir, creating dir, for a process
// that runs the outbox Worker on the embedded store in it (serve, feed).
// Only one may: each would dispatch the records it claims to its own
// broker. When another process holds the lock, the error names its PID.
// Producers (publish) and the admin commands take no lock.
func lockDataDir(dir string) (*dataDirLock, error) {
	return lockDir(dir, func(abs, holder string) error {
		return fmt.Errorf("data directory %s is in use: %s runs the outbox Worker on its embedded SQLite store (lock %s). "+
			"Only one process may, or records would reach one node's clients and not the other's: stop that one, "+
			"or give this one another --data-dir; several nodes share PostgreSQL (--database-url) and Redis (--redis-url)",
			abs, holder, filepath.Join(abs, lockFileName))
	})
}

// lockHistoryDir takes the lock on the in-memory broker's history
// directory, creating it: only one process may append to its log.
func lockHistoryDir(dir string) (*dataDirLock, error) {
	return lockDir(dir, func(abs, holder string) error {
		return fmt.Errorf("history directory %s is in use: %s keeps its channel history there (lock %s). "+
			"Only one node may: stop that one, or give this one another --data-dir (or --history-log=false)",
			abs, holder, filepath.Join(abs, lockFileName))
	})
}

// lockDir takes the lock file lockFileName in dir, creating dir; when
// another process holds it, inUse makes the error from dir's absolute path
// and the holder ("herald process PID" when it wrote its PID).
func lockDir(dir string, inUse func(abs, holder string) error) (*dataDirLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data directory lock: %w", err)
	}
	deadline := time.Now().Add(lockWait)
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("data directory lock %s: %w", path, err)
		}
		if time.Now().After(deadline) {
			holder := "another process"
			if b, rerr := os.ReadFile(path); rerr == nil {
				if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
					holder = "herald process " + strconv.Itoa(pid)
				}
			}
			_ = f.Close()
			abs, _ := filepath.Abs(dir)
			return nil, inUse(abs, holder)
		}
		time.Sleep(10 * time.Millisecond) // a probe holds the lock for microseconds
	}
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("data directory lock %s: %w", path, err)
	}
	return &dataDirLock{f: f}, nil
}

// release drops the lock. The file stays: removing it would let a process
// that opened it before take a lock on a file no one else sees.
func (l *dataDirLock) release() {
	if l != nil && l.f != nil {
		_ = l.f.Close()
	}
}

// consumerActive reports whether a process holds the consumer lock on dir
// now; known is false where that cannot be told.
func consumerActive(dir string) (active, known bool) {
	f, err := os.Open(filepath.Join(dir, lockFileName))
	if errors.Is(err, os.ErrNotExist) {
		return false, true
	}
	if err != nil {
		return false, false
	}
	defer f.Close()
	switch err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); {
	case err == nil:
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return false, true
	case errors.Is(err, syscall.EWOULDBLOCK):
		return true, true
	}
	return false, false
}

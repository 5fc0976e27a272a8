//go:build !unix

package main

import (
	"fmt"
	"os"
)

// dataDirLock is a no-op where flock(2) is missing: two processes on one
// data directory are not detected there.
type dataDirLock struct{}

func lockDataDir(dir string) (*dataDirLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	return &dataDirLock{}, nil
}

// lockHistoryDir creates dir; as lockDataDir, it detects no other process.
func lockHistoryDir(dir string) (*dataDirLock, error) { return lockDataDir(dir) }

func (l *dataDirLock) release() {}

func consumerActive(string) (active, known bool) { return false, false }

package main

import (
	"sync"
	"testing"
)

// TestDevSecretConcurrentCreate: processes starting together on one data
// directory end up with one development secret, created once.
func TestDevSecretConcurrentCreate(t *testing.T) {
	dir := t.TempDir()
	const n = 16
	secrets := make([]string, n)
	created := make([]bool, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { secrets[i], created[i], errs[i] = devSecret(dir, true) })
	}
	wg.Wait()
	creators := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if secrets[i] == "" || secrets[i] != secrets[0] {
			t.Fatalf("caller %d got secret %q, caller 0 %q", i, secrets[i], secrets[0])
		}
		if created[i] {
			creators++
		}
	}
	if creators != 1 {
		t.Fatalf("%d callers created the secret, want 1", creators)
	}
	again, createdAgain, err := devSecret(dir, true)
	if err != nil || again != secrets[0] || createdAgain {
		t.Fatalf("a later start read %q (created %v, %v), want the existing secret", again, createdAgain, err)
	}
}

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
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

// TestDevSecretRefusedWhenOthersCanRead: a development secret file that
// other users can read or write is refused, by serve and by herald token,
// with a message naming the file and the fix; the file Herald creates is
// private (0600) and accepted.
func TestDevSecretRefusedWhenOthersCanRead(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := devSecret(dir, true); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, devSecretFile)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("created secret: %v, mode %v, want 0600", err, fi.Mode().Perm())
	}
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, _, err := devSecret(dir, true)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "chmod 600") ||
			!strings.Contains(err.Error(), "other users") {
			t.Fatalf("mode %v: %v, want a refusal naming the file and chmod 600", mode, err)
		}
		var out, errOut strings.Builder
		code := run(context.Background(), []string{"token", "--data-dir", dir, "--tenant", "acme", "--sub", "u1"}, &out, &errOut)
		if code == 0 || !strings.Contains(errOut.String(), "chmod 600") {
			t.Fatalf("mode %v: herald token exit %d: %s%s", mode, code, out.String(), errOut.String())
		}
		code = run(context.Background(), []string{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0"}, &out, &errOut)
		if code == 0 || !strings.Contains(errOut.String(), "other users") {
			t.Fatalf("mode %v: herald serve exit %d: %s", mode, code, errOut.String())
		}
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := devSecret(dir, false); err != nil {
		t.Fatalf("after chmod 600: %v", err)
	}
}

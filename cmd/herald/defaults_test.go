package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/testenv"
)

// buildHerald compiles the binary the way `make run` does.
func buildHerald(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "herald")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestServeWithDefaults runs the binary as `make run` does (embedded SQLite,
// in-memory broker, generated development secret) and follows the banner:
// demo page, token, publish, stream.
func TestServeWithDefaults(t *testing.T) {
	bin := buildHerald(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	cmd := exec.CommandContext(ctx, bin, "serve", "--listen", "127.0.0.1:0")
	cmd.Dir, cmd.Env = dir, testenv.HeraldEnv()
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testenv.SyncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		for range lines {
		}
		if err := <-exited; err != nil {
			t.Errorf("serve did not exit cleanly on SIGTERM: %v\n%s", err, stderr.String())
		}
	}()

	var base string
	var banner []string
	for base == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("serve exited: %s", stderr.String())
			}
			banner = append(banner, l)
			if m := listenRE.FindStringSubmatch(l); m != nil {
				base = m[1]
			}
		case <-ctx.Done():
			t.Fatalf("no banner: %s", stderr.String())
		}
	}
	for range 4 { // the rest of the banner: token, stream, publish, demo
		banner = append(banner, <-lines)
	}
	text := strings.Join(banner, "\n")
	for _, want := range []string{"store: SQLite", "broker: in-memory", "token --tenant", "publish --tenant", "demo page"} {
		if !strings.Contains(text, want) {
			t.Errorf("banner lacks %q:\n%s", want, text)
		}
	}
	if !strings.Contains(stderr.String(), "DEVELOPMENT HMAC secret") {
		t.Errorf("no loud warning about the development secret:\n%s", stderr.String())
	}

	page := get(t, base+"/")
	if !strings.Contains(page, "<html") || !strings.Contains(page, "EventSource") {
		t.Fatalf("demo page is not the EventSource page:\n%.300s", page)
	}
	get(t, base+"/healthz")
	waitReady(t, base) // once the Worker's first claim has gone through

	// herald token finds the development secret in the data directory.
	tokCmd := exec.Command(bin, "token", "--tenant", "acme", "--sub", "u1", "--subscribe", "orders/*", "--ttl", "1h")
	tokCmd.Dir, tokCmd.Env = dir, testenv.HeraldEnv()
	out, err := tokCmd.Output()
	if err != nil {
		t.Fatalf("herald token: %v", err)
	}
	tok := strings.TrimSpace(string(out))

	s := subscribeSSE(t, base+"/v1/sse?channel=orders/1", tok, "")

	pub := exec.Command(bin, "publish", "--tenant", "acme", "--channel", "orders/1", "--type", "order.updated", "--data", `{"status":"paid"}`)
	pub.Dir, pub.Env = dir, testenv.HeraldEnv()
	out, err = pub.Output()
	if err != nil {
		t.Fatalf("herald publish: %v", err)
	}
	id := strings.TrimSpace(string(out))
	e, _ := s.nextPublication(t, 10*time.Second)
	if e.ID != id || string(e.Data) != `{"status":"paid"}` {
		t.Fatalf("got %+v, want id %s", e, id)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}

// waitReady polls base's /readyz until it answers 200.
func waitReady(t *testing.T, base string) {
	t.Helper()
	waitStatus(t, base+"/readyz", http.StatusOK)
}

// waitStatus polls url until it answers code (for at most 2m).
func waitStatus(t *testing.T, url string, code int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute) // a failure bound, not a budget
	for {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == code {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still %d after 2m, want %d", url, resp.StatusCode, code)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

package ratelog

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	l := NewLimiter(time.Minute, 2)
	clock := time.Unix(1_000_000, 0)
	l.Now = func() time.Time { return clock }
	for i, want := range []bool{true, true, false, false, false} {
		if ok, _ := l.Allow("a"); ok != want {
			t.Fatalf("call %d: %v, want %v", i, ok, want)
		}
	}
	if ok, _ := l.Allow("b"); !ok {
		t.Fatal("another key was held back")
	}
	clock = clock.Add(time.Minute)
	if ok, n := l.Allow("a"); !ok || n != 3 {
		t.Fatalf("next window: %v, %d suppressed, want true, 3", ok, n)
	}
	if ok, n := l.Allow("a"); !ok || n != 0 {
		t.Fatalf("second in the window: %v, %d", ok, n)
	}
}

func TestLoggerSuppressedCount(t *testing.T) {
	var buf bytes.Buffer
	l := New(slog.New(slog.NewTextHandler(&buf, nil)), time.Minute, 1)
	clock := time.Unix(1_000_000, 0)
	l.Now = func() time.Time { return clock }
	for range 5 {
		l.Warn("broker down", "err", "refused")
	}
	l.Log(slog.LevelDebug, "broker down") // below the handler's level: not counted
	clock = clock.Add(time.Minute)
	l.Log(slog.LevelWarn, "broker down")
	out := buf.String()
	if n := strings.Count(out, "broker down"); n != 2 || !strings.Contains(out, "suppressed=4") {
		t.Fatalf("log:\n%s", out)
	}
}

func TestLimiterConcurrent(t *testing.T) {
	l := NewLimiter(time.Hour, 10)
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for range 50 {
		wg.Go(func() {
			if ok, _ := l.Allow("k"); ok {
				mu.Lock()
				allowed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if allowed != 10 {
		t.Fatalf("%d let through, want 10", allowed)
	}
}

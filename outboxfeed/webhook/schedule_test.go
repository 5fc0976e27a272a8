package webhook

import (
	"testing"
	"time"
)

func TestRetryCeilings(t *testing.T) {
	s := Config{}.Schedule()
	want := []time.Duration{
		10 * time.Second, 40 * time.Second, 160 * time.Second, 640 * time.Second, 2560 * time.Second,
		10240 * time.Second, 40960 * time.Second, 24 * time.Hour, 24 * time.Hour, 24 * time.Hour,
	}
	for n, w := range want {
		if got := s.RetryCeiling(n + 1); got != w {
			t.Errorf("RetryCeiling(%d) = %v; want %v", n+1, got, w)
		}
	}
}

func TestRetry(t *testing.T) {
	s := Config{}.Schedule()
	// Full jitter: u spans [0, ceiling].
	for n := 1; n < s.MaxAttempts; n++ {
		lo, ok1 := s.Retry(n, time.Minute, 0, 0)
		hi, ok2 := s.Retry(n, time.Minute, 0, 0.9999999)
		c := s.RetryCeiling(n)
		if !ok1 || !ok2 || lo != 0 || hi > c || hi < c*99/100 {
			t.Fatalf("attempt %d: [%v, %v] (%v %v); ceiling %v", n, lo, hi, ok1, ok2, c)
		}
	}
	// The budget: max_attempts attempts, then a dead letter.
	if _, ok := s.Retry(s.MaxAttempts, time.Minute, 0, 0.5); ok {
		t.Fatal("a retry after the last attempt")
	}
	// max_age: a retry past it is moved to it; at or after it, a dead letter.
	d, ok := s.Retry(9, s.MaxAge-time.Hour, 0, 0.9)
	if !ok || d != time.Hour {
		t.Fatalf("near max_age: %v %v; want 1h true", d, ok)
	}
	if _, ok := s.Retry(2, s.MaxAge, 0, 0.5); ok {
		t.Fatal("a retry at max_age")
	}
	// Retry-After raises the delay, within retry_after_max.
	if d, _ := s.Retry(1, 0, 30*time.Second, 0); d != 30*time.Second {
		t.Fatalf("Retry-After 30s gave %v", d)
	}
	if d, _ := s.Retry(1, 0, 10*time.Hour, 0); d != s.RetryAfterMax {
		t.Fatalf("Retry-After 10h gave %v; want %v", d, s.RetryAfterMax)
	}
	// Out-of-range draws stay in range.
	for _, u := range []float64{-1, 2, 1} {
		if d, _ := s.Retry(3, 0, 0, u); d < 0 || d > s.RetryCeiling(3) {
			t.Fatalf("u %v gave %v", u, d)
		}
	}
}

func TestOutage(t *testing.T) {
	s := Config{}.Schedule()
	for f, c := range []time.Duration{1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300} {
		c *= time.Second
		if got := s.OutageCeiling(f + 1); got != c {
			t.Fatalf("OutageCeiling(%d) = %v; want %v", f+1, got, c)
		}
		lo, hi := s.Outage(f+1, 0, 0), s.Outage(f+1, 0, 0.9999999)
		if lo != c/2 || hi > c || hi < c*99/100 {
			t.Fatalf("Outage(%d) spans [%v, %v]; want [%v, %v]", f+1, lo, hi, c/2, c)
		}
	}
	// Retry-After is honoured: never sooner, at most a tenth later; held
	// within [outage_base_delay, retry_after_max].
	for _, tc := range []struct{ ra, lo, hi time.Duration }{
		{90 * time.Second, 90 * time.Second, 99 * time.Second},
		{time.Millisecond, time.Second, 1100 * time.Millisecond},
		{48 * time.Hour, time.Hour, 66 * time.Minute},
	} {
		for _, u := range []float64{0, 0.5, 0.9999} {
			if d := s.Outage(7, tc.ra, u); d < tc.lo || d > tc.hi {
				t.Fatalf("Outage(7, %v, %v) = %v; want within [%v, %v]", tc.ra, u, d, tc.lo, tc.hi)
			}
		}
	}
}

func TestDisable(t *testing.T) {
	s := Config{}.Schedule()
	if s.Disable(119*time.Hour) || !s.Disable(120*time.Hour) {
		t.Fatal("disable_after is not 120h")
	}
	s = Config{DisableAfter: time.Hour}.Schedule()
	if !s.Disable(time.Hour) {
		t.Fatal("disable_after setting ignored")
	}
}

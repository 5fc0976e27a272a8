package outboxfeed

import (
	"context"
	"testing"
	"time"
)

// TestSleepOrKick: a short wait (timed by preciseSleep) and a long one
// (a runtime timer) each end on a kick, on ctx, or after their time, never
// before it.
func TestSleepOrKick(t *testing.T) {
	for _, d := range []time.Duration{500 * time.Microsecond, 2 * preciseBelow} {
		kick := make(chan struct{}, 1)
		start := time.Now()
		if sleepOrKick(context.Background(), d, kick) {
			t.Errorf("%v: reported a kick that never came", d)
		}
		if took := time.Since(start); took < d {
			t.Errorf("%v: returned after %v, before its time", d, took)
		}

		kick <- struct{}{}
		if !sleepOrKick(context.Background(), time.Hour, kick) {
			t.Errorf("%v: a kick waiting before the sleep was not reported", d)
		}
		go func() { kick <- struct{}{} }()
		if !sleepOrKick(context.Background(), time.Hour, kick) {
			t.Errorf("%v: a kick during the sleep was not reported", d)
		}

		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if sleepOrKick(ctx, d, make(chan struct{})) {
			t.Errorf("%v: a cancelled wait reported a kick", d)
		}
	}
	// The short path with a kick ready before its own sleep ends.
	kick := make(chan struct{}, 1)
	kick <- struct{}{}
	if !sleepOrKick(context.Background(), time.Millisecond, kick) {
		t.Error("a kick ready before a short sleep was not reported")
	}
	// The precise sleep itself never returns early.
	start := time.Now()
	preciseSleep(300 * time.Microsecond)
	if took := time.Since(start); took < 300*time.Microsecond {
		t.Errorf("preciseSleep(300µs) returned after %v", took)
	}
}

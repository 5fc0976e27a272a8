package backoff

import (
	"testing"
	"time"
)

func TestBackoffBounds(t *testing.T) {
	base, limit := 10*time.Millisecond, 80*time.Millisecond
	for attempt := 1; attempt <= 12; attempt++ {
		ceiling := Exp(attempt, base, limit)
		if want := min(limit, base<<(attempt-1)); ceiling != want {
			t.Fatalf("Exp(%d) = %v, want %v", attempt, ceiling, want)
		}
		for range 200 {
			if d := Retry(attempt, base, limit); d < 0 || d > ceiling {
				t.Fatalf("Retry(%d) = %v outside [0, %v]", attempt, d, ceiling)
			}
			if d := Outage(attempt, base, limit); d < ceiling/2 || d > ceiling {
				t.Fatalf("Outage(%d) = %v outside [%v, %v]", attempt, d, ceiling/2, ceiling)
			}
		}
	}
	if d := Exp(1000, time.Second, time.Minute); d != time.Minute {
		t.Fatalf("large attempt = %v, want the cap", d)
	}
	if Retry(3, 0, 0) != 0 {
		t.Fatal("zero base must give zero delay")
	}
}

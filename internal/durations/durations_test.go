package durations

import (
	"strings"
	"testing"
	"time"
)

func TestShort(t *testing.T) {
	for _, d := range []time.Duration{0, time.Microsecond * 500, time.Second, 90 * time.Second, time.Minute, time.Hour, 24 * time.Hour, time.Hour + time.Second, time.Hour + 10*time.Minute} {
		got := Short(d)
		back, err := time.ParseDuration(got)
		if err != nil || back != d {
			t.Errorf("%v → %q → %v, %v", d, got, back, err)
		}
		if strings.HasSuffix(got, "m0s") || strings.HasSuffix(got, "h0m") {
			t.Errorf("%v → %q keeps a zero unit", d, got)
		}
	}
}

package timefmt

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestAppendMatchesLayout: Append writes what AppendFormat with Layout
// writes, over the whole range of years it covers, in any zone, and
// beyond it.
func TestAppendMatchesLayout(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	zones := []*time.Location{time.UTC, time.FixedZone("E", 5*3600+1800), time.FixedZone("W", -11*3600)}
	times := []time.Time{
		{}, time.Unix(0, 0), time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 1, time.UTC), time.Date(2024, 2, 29, 12, 0, 0, 5, zones[1]),
	}
	for range 20000 {
		sec := rng.Int64N(400*365*86400) - 50*365*86400 // 1920 to 2370
		times = append(times, time.Unix(sec, rng.Int64N(1e9)).In(zones[rng.IntN(len(zones))]))
	}
	for _, in := range times {
		want := in.UTC().AppendFormat(nil, Layout)
		if got := Append([]byte("x"), in); string(got) != "x"+string(want) {
			t.Fatalf("time %v: %s, want %s", in, got[1:], want)
		}
	}
}

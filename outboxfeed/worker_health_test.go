package outboxfeed

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A stats refresh reads the handler's state from the store and sets the
// target gauges from it; a lane that observed the target in between (it
// recovered, or failed) has the newer word, and the refresh's reading is
// dropped. Without that, the gauge stayed wrong until the next refresh.
func TestRefreshOlderThanAnObservationLeavesTheGauges(t *testing.T) {
	m, err := newMetrics(nil, "hooks")
	if err != nil {
		t.Fatal(err)
	}
	w := &Worker{m: m}
	w.setGauges(&gaugeOff, nil) // the target failed

	gen := w.health.gaugeGen() // a refresh starts reading: failing
	w.setGauges(&gaugeOn, nil) // a lane sees it recover
	w.refreshGauges(gen, 0, 0) // the refresh's reading arrives
	if up := testutil.ToFloat64(m.targetUp); up != 1 {
		t.Fatalf("target_up = %v after a stale refresh, want 1 (the lane's newer observation)", up)
	}

	gen = w.health.gaugeGen() // a refresh with nothing observed meanwhile
	w.refreshGauges(gen, 0, 1)
	if up, off := testutil.ToFloat64(m.targetUp), testutil.ToFloat64(m.disabled); up != 0 || off != 1 {
		t.Fatalf("target_up = %v, disabled = %v; want the store's 0 and 1", up, off)
	}
}

package outboxfeed

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestProbeDelayBackoff(t *testing.T) {
	base, limit := 250*time.Millisecond, 5*time.Second
	for failures := range 12 {
		ceiling := min(limit, base<<failures)
		for range 200 {
			if d := probeDelay(failures, base, limit); d < ceiling*3/4 || d > ceiling {
				t.Fatalf("probeDelay(%d) = %v outside [%v, %v]", failures, d, ceiling*3/4, ceiling)
			}
		}
	}
	// The bound the outage test relies on: with the shortest waits, 30s
	// hold at most 12 pings.
	var elapsed time.Duration
	n := 0
	for ; ; n++ {
		elapsed += min(limit, base<<min(n, 20)) * 3 / 4
		if elapsed > 30*time.Second {
			break
		}
	}
	if n > 12 {
		t.Fatalf("%d pings fit in 30s", n)
	}
}

func TestProbeConfig(t *testing.T) {
	for name, c := range map[string]struct {
		cfg  WorkerConfig
		want string
	}{
		"probe max below interval": {WorkerConfig{ProbeInterval: time.Second, ProbeMaxInterval: 500 * time.Millisecond}, "ProbeMaxInterval"},
		"negative probe":           {WorkerConfig{ProbeInterval: -time.Second}, "ProbeInterval"},
		"negative broker probe":    {WorkerConfig{BrokerProbeMaxInterval: -time.Second}, "BrokerProbeMaxInterval"},
	} {
		err := c.cfg.withDefaults().validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalidConfig mentioning %q", name, err, c.want)
		}
	}
	d := WorkerConfig{}.withDefaults()
	if d.ProbeInterval != 250*time.Millisecond || d.ProbeMaxInterval != 5*time.Second || d.BrokerProbeMaxInterval != time.Second {
		t.Fatalf("probe defaults %v %v %v", d.ProbeInterval, d.ProbeMaxInterval, d.BrokerProbeMaxInterval)
	}
	if slow := (WorkerConfig{ProbeInterval: 10 * time.Second}).withDefaults(); slow.ProbeMaxInterval != 10*time.Second || slow.validate() != nil {
		t.Fatalf("a long ProbeInterval gets ProbeMaxInterval %v", slow.ProbeMaxInterval)
	}
}

func TestGate(t *testing.T) {
	g := newGate()
	if g.waitCh() != nil || g.open() {
		t.Fatal("a new gate must be open")
	}
	if !g.close() || g.close() {
		t.Fatal("close must report only the first closing")
	}
	ch := g.waitCh()
	if ch == nil {
		t.Fatal("a shut gate gave no channel to wait on")
	}
	select {
	case <-g.shutSig:
	default:
		t.Fatal("closing did not wake the prober")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if g.await(ctx) {
		t.Fatal("await on a shut gate returned true with ctx done")
	}
	done := make(chan bool)
	go func() { done <- g.await(context.Background()) }()
	if !g.open() || g.open() {
		t.Fatal("open must report only the first opening")
	}
	<-ch
	if !<-done {
		t.Fatal("await did not see the gate open")
	}
	if g.sinceOpened() > time.Minute {
		t.Fatal("sinceOpened after opening")
	}
}

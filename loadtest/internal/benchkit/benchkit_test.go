package benchkit

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// These tests need neither PostgreSQL nor a broker.

func TestSummarize(t *testing.T) {
	if q := Summarize(nil); q.N != 0 || q.Max != 0 {
		t.Fatalf("Summarize(nil) = %+v", q)
	}
	d := make([]time.Duration, 0, 1000)
	for i := 1000; i >= 1; i-- { // unsorted on purpose
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	q := Summarize(d)
	want := Quantiles{N: 1000, P50: 500 * time.Millisecond, P99: 990 * time.Millisecond, P999: 999 * time.Millisecond, Max: time.Second}
	if q != want {
		t.Fatalf("Summarize = %+v, want %+v", q, want)
	}
	if q := Summarize([]time.Duration{7}); q.P50 != 7 || q.P999 != 7 || q.Max != 7 {
		t.Fatalf("one sample: %+v", q)
	}
}

func TestQuantilesJSON(t *testing.T) {
	b, err := json.Marshal(Quantiles{N: 2, P50: 1500 * time.Microsecond, Max: 3 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]float64
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"n": 2, "p50_ms": 1.5, "p99_ms": 0, "p999_ms": 0, "max_ms": 3}
	if len(got) != len(want) {
		t.Fatalf("json = %s", b)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("json = %s: %s = %v, want %v", b, k, got[k], v)
		}
	}
}

func TestFormatting(t *testing.T) {
	if got := MS(1500 * time.Microsecond); got != "1.50 ms" {
		t.Errorf("MS = %q", got)
	}
	if got := MS(0); got != "0.00 ms" {
		t.Errorf("MS(0) = %q", got)
	}
	if got := PerRecordMicros(3*time.Millisecond, 1000); got != 3 {
		t.Errorf("PerRecordMicros = %v", got)
	}
	if got := PerRecordMicros(time.Second, 0); got != 0 {
		t.Errorf("PerRecordMicros(_, 0) = %v", got)
	}
	if OnOff(true) != "on" || OnOff(false) != "off" {
		t.Error("OnOff")
	}
}

func TestPhases(t *testing.T) {
	if !HasPhase("drain, latency", "latency") || !HasPhase("drain", "drain") || HasPhase("drain,latency", "producers") || HasPhase("", "drain") {
		t.Error("HasPhase")
	}
	if err := CheckPhases("drain, latency", "drain", "latency", "producers"); err != nil {
		t.Errorf("CheckPhases: %v", err)
	}
	err := CheckPhases("drain,bogus, x", "drain", "latency")
	want := "-phases: unknown phase \"bogus\" (want drain, latency)\n-phases: unknown phase \" x\" (want drain, latency)"
	if err == nil || err.Error() != want {
		t.Errorf("CheckPhases = %v, want %s", err, want)
	}
	if err := CheckPhases("", "drain"); err == nil {
		t.Error("CheckPhases(\"\"): no error")
	}

	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	phases := "drain"
	PhasesFlag(fs, &phases, "drain", "latency")
	if u := fs.Lookup("phases").Usage; u != "comma-separated phases to run: drain, latency" {
		t.Errorf("-phases usage %q", u)
	}
	if err := fs.Parse([]string{"-phases", "latency"}); err != nil || phases != "latency" || fs.Lookup("phases").DefValue != "drain" {
		t.Errorf("-phases latency: %q, default %q, %v", phases, fs.Lookup("phases").DefValue, err)
	}
}

func TestPollUntil(t *testing.T) {
	ctx := context.Background()
	n := 0
	if err := PollUntil(ctx, time.Minute, time.Millisecond, nil, func() (bool, error) { n++; return n == 3, nil }); err != nil || n != 3 {
		t.Fatalf("PollUntil = %v after %d calls", err, n)
	}
	boom := errors.New("boom")
	if err := PollUntil(ctx, time.Minute, time.Millisecond, nil, func() (bool, error) { return false, boom }); err != boom {
		t.Fatalf("failing cond: %v", err)
	}
	never := func() (bool, error) { return false, nil }
	if err := PollUntil(ctx, 10*time.Millisecond, time.Millisecond, nil, never); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("timeout without cause: %v", err)
	}
	cause := errors.New("timed out")
	if err := PollUntil(ctx, 10*time.Millisecond, time.Millisecond, cause, never); err != cause {
		t.Fatalf("timeout with cause: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := PollUntil(cctx, time.Minute, time.Millisecond, cause, never); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}
}

func TestPaced(t *testing.T) {
	ctx := context.Background()
	got, _, err := Paced(ctx, 10_000, 4, 100, func(k int) (int, error) { return k, nil })
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if len(got) != 100 || got[0] != 0 || got[99] != 99 {
		t.Fatalf("got %d results: %v", len(got), got)
	}
	boom := errors.New("boom")
	var calls atomic.Int64
	got, _, err = Paced(ctx, 10_000, 1, 50, func(k int) (int, error) {
		calls.Add(1)
		if k == 10 {
			return 0, boom
		}
		return k, nil
	})
	if err != boom || got != nil || calls.Load() != 11 {
		t.Fatalf("failing worker: %v, %v, %d calls", got, err, calls.Load())
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := Paced(cctx, 10, 2, 100, func(k int) (int, error) { return k, nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}
}

func TestUnpaced(t *testing.T) {
	ctx := context.Background()
	var seen [3]atomic.Int64
	txs, commits, elapsed, err := Unpaced(ctx, 3, 20*time.Millisecond, func(w, i int) (time.Duration, time.Duration, error) {
		if int64(i) != seen[w].Load() {
			t.Errorf("producer %d: i = %d, want %d", w, i, seen[w].Load())
		}
		seen[w].Add(1)
		time.Sleep(time.Millisecond)
		return 2 * time.Millisecond, time.Millisecond, nil
	})
	if err != nil || elapsed < 20*time.Millisecond {
		t.Fatalf("Unpaced: %v after %v", err, elapsed)
	}
	total := seen[0].Load() + seen[1].Load() + seen[2].Load()
	if int64(len(txs)) != total || len(commits) != len(txs) || total < 3 || txs[0] != 2*time.Millisecond || commits[0] != time.Millisecond {
		t.Fatalf("%d tx, %d commit times for %d transactions", len(txs), len(commits), total)
	}
	boom := errors.New("boom")
	_, _, _, err = Unpaced(ctx, 2, time.Minute, func(w, i int) (time.Duration, time.Duration, error) {
		if w == 1 {
			return 0, 0, boom
		}
		if i == 5 {
			return 0, 0, errors.New("later")
		}
		return 0, 0, nil
	})
	if err == nil || err.Error() != "later" { // producer 0's error comes first
		t.Fatalf("failing producers: %v", err)
	}
}

func TestParseStat(t *testing.T) {
	line := "4242 (postgres: wal writer) S 1 4242 4242 0 -1 4194368 100 0 0 0 250 50 0 0 20 0 1 0 123 0 0"
	comm, cpu, err := ParseStat(line)
	if err != nil || comm != "postgres: wal writer" || cpu != 3*time.Second {
		t.Fatalf("ParseStat = %q, %v, %v", comm, cpu, err)
	}
	for _, bad := range []string{"garbage", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 u s 0"} {
		if _, _, err := ParseStat(bad); err == nil {
			t.Errorf("ParseStat(%q): no error", bad)
		}
	}
}

func TestProcCPU(t *testing.T) {
	for range 1_000_000 { // burn a little CPU
		_ = time.Now()
	}
	if _, err := ProcCPU(os.Getpid()); err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	if SelfCPU() <= 0 {
		t.Errorf("SelfCPU = %v", SelfCPU())
	}
	if _, err := ProcCPU(-1); err == nil {
		t.Error("ProcCPU(-1): no error")
	}
}

func TestCheckFlags(t *testing.T) {
	if err := CheckPaced(1000, time.Second, 16); err != nil {
		t.Errorf("CheckPaced: %v", err)
	}
	want := "-rate 0: must be 1–1,000,000\n-latency-duration 500ms: must be ≥ 1s\n-latency-producers 0: must be ≥ 1"
	if err := CheckPaced(0, 500*time.Millisecond, 0); err == nil || err.Error() != want {
		t.Errorf("CheckPaced = %v, want %s", err, want)
	}
	if err := CheckPaced(1_000_001, time.Minute, 1); err == nil || err.Error() != "-rate 1000001: must be 1–1,000,000" {
		t.Errorf("CheckPaced(too fast) = %v", err)
	}
	if err := CheckUnpaced(16, time.Second); err != nil {
		t.Errorf("CheckUnpaced: %v", err)
	}
	want = "-producers 0: must be ≥ 1\n-producer-duration 0s: must be ≥ 1s"
	if err := CheckUnpaced(0, 0); err == nil || err.Error() != want {
		t.Errorf("CheckUnpaced = %v, want %s", err, want)
	}
}

func TestFlagErrors(t *testing.T) {
	var ok FlagErrors
	ok.Add(nil)
	ok.AtLeast("-n", 1, 1)
	ok.Within("-m", 1024, 1, 1024)
	ok.AtLeastDuration("-d", time.Second, time.Second)
	if err := ok.Err(); err != nil {
		t.Errorf("good flags: %v", err)
	}
	var bad FlagErrors
	bad.Within("-conns", 0, 1, 19_500)
	bad.Within("-dial-concurrency", 1025, 1, 1024)
	bad.AtLeast("-retained", -1, 0)
	bad.AtLeastDuration("-poll-interval", 0, time.Millisecond)
	bad.Add(errors.New("-x: as given"))
	bad.Badf("-y %q: want a or b", "c")
	want := "-conns 0: must be 1–19,500\n-dial-concurrency 1025: must be 1–1024\n-retained -1: must be ≥ 0\n" +
		"-poll-interval 0s: must be ≥ 1ms\n-x: as given\n-y \"c\": want a or b"
	if err := bad.Err(); err == nil || err.Error() != want {
		t.Errorf("Err = %v, want\n%s", err, want)
	}
}

func TestMean(t *testing.T) {
	if got := Mean([]float64{1, 2, 6}); got != 3 {
		t.Errorf("Mean(1, 2, 6) = %v, want 3", got)
	}
}

func TestStaging(t *testing.T) {
	// Every row once, in chunks no larger than the batch.
	var rows [1003]atomic.Int32
	s := StartStaging(context.Background(), 4, len(rows), 10, func(ctx context.Context, from, to int) error {
		if to-from > 10 || to <= from {
			return errors.New("bad chunk")
		}
		for k := from; k < to; k++ {
			rows[k].Add(1)
		}
		return nil
	})
	<-s.done
	if !s.Done() || s.Err() != nil {
		t.Fatalf("Done %v, Err %v", s.Done(), s.Err())
	}
	s.Stop()
	for k := range rows {
		if n := rows[k].Load(); n != 1 {
			t.Fatalf("row %d inserted %d times", k, n)
		}
	}

	// A producer's error is Err once all have returned.
	boom := errors.New("boom")
	s = StartStaging(context.Background(), 2, 10, 1, func(ctx context.Context, from, to int) error {
		if from == 5 {
			return boom
		}
		return nil
	})
	<-s.done
	if !errors.Is(s.Err(), boom) {
		t.Fatalf("Err %v; want boom", s.Err())
	}
	s.Stop()

	// Stop ends producers that would run on.
	s = StartStaging(context.Background(), 2, 1_000_000_000, 1, func(ctx context.Context, from, to int) error {
		return nil
	})
	s.Stop()
	if !s.Done() || s.Err() != nil {
		t.Fatalf("after Stop: Done %v, Err %v", s.Done(), s.Err())
	}
}

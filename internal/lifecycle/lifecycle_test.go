package lifecycle

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStartRunsUntilStop(t *testing.T) {
	var s Service
	var ran, ended atomic.Int32
	initCtx := make(chan context.Context, 1)
	run := func(ctx context.Context) {
		ran.Add(1)
		<-ctx.Done()
		ended.Add(1)
	}
	err := s.Start(context.Background(), func(ctx context.Context) error { initCtx <- ctx; return nil }, run, run)
	if err != nil {
		t.Fatal(err)
	}
	if started, stopped := s.State(); !started || stopped {
		t.Fatalf("State() = %v, %v after Start", started, stopped)
	}
	if err := s.Start(context.Background(), nil, run); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Start = %v, want ErrStarted", err)
	}
	if !s.Stop(nil) {
		t.Fatal("first Stop reported false")
	}
	if ran.Load() != 2 || ended.Load() != 2 {
		t.Fatalf("ran %d, ended %d, want 2 and 2 once Stop returns", ran.Load(), ended.Load())
	}
	if ctx := <-initCtx; ctx.Err() == nil {
		t.Fatal("init's context still live after Stop")
	}
	if s.Stop(nil) {
		t.Fatal("second Stop reported true")
	}
	if err := s.Start(context.Background(), nil, run); !errors.Is(err, ErrStopped) {
		t.Fatalf("Start after Stop = %v, want ErrStopped", err)
	}
	if ran.Load() != 2 {
		t.Fatal("a refused Start ran its goroutines")
	}
}

func TestStopBeforeStart(t *testing.T) {
	var s Service
	interrupted := false
	if !s.Stop(func() { interrupted = true }) || !interrupted {
		t.Fatal("Stop before Start: want the first Stop, with interrupt called")
	}
	if err := s.Start(context.Background(), nil, func(context.Context) { t.Error("ran after Stop") }); !errors.Is(err, ErrStopped) {
		t.Fatalf("Start after Stop = %v, want ErrStopped", err)
	}
}

func TestInitErrorRunsNothing(t *testing.T) {
	var s Service
	boom := errors.New("boom")
	if err := s.Start(context.Background(), func(context.Context) error { return boom },
		func(context.Context) { t.Error("ran after a failed init") }); !errors.Is(err, boom) {
		t.Fatalf("Start = %v, want the init error", err)
	}
	s.Stop(nil)
}

func TestParentContextEndsTheRuns(t *testing.T) {
	var s Service
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	if err := s.Start(ctx, nil, func(ctx context.Context) { <-ctx.Done(); close(done) }); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	s.Stop(nil)
}

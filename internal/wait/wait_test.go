package wait

import (
	"context"
	"testing"
	"time"
)

func TestSleep(t *testing.T) {
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("a sleep that ran out reported a cancel")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("a cancelled sleep reported that it ran out")
	}
	if Sleep(ctx, 0) || !Sleep(context.Background(), 0) {
		t.Fatal("a zero sleep does not report whether the context is live")
	}
}

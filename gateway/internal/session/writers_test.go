package session

import (
	"testing"
	"time"
)

// jobFunc is a writerJob running a function.
type jobFunc func()

func (f jobFunc) writeLoop() { f() }

// TestWriterPoolReusesWaitingGoroutines: a writer that finished waits for
// the next job, which then runs on it (no new goroutine, no fresh stack);
// a job stuck on a client never holds another one up; Stop lets the
// waiting goroutines go.
func TestWriterPoolReusesWaitingGoroutines(t *testing.T) {
	p := NewWriterPool()
	const worker = "session.(*WriterPool).work("
	ran := make(chan struct{})
	p.Run(jobFunc(func() { ran <- struct{}{} }))
	<-ran
	eventually(t, time.Minute, "the writer to wait for work", func() bool {
		return stackCount(worker) == 1 && stackCount("session.jobFunc.writeLoop(") == 0
	})
	for range 10 {
		p.Run(jobFunc(func() { ran <- struct{}{} }))
		<-ran
		eventually(t, time.Minute, "the job to be done", func() bool {
			return stackCount("session.jobFunc.writeLoop(") == 0
		})
		if n := stackCount(worker); n != 1 {
			t.Fatalf("%d writer goroutines, want the one waiting", n)
		}
	}

	stuck := make(chan struct{})
	p.Run(jobFunc(func() { <-stuck }))
	p.Run(jobFunc(func() { ran <- struct{}{} }))
	<-ran // while the other is stuck
	close(stuck)

	p.Stop()
	eventually(t, time.Minute, "the waiting writers to exit", func() bool { return stackCount(worker) == 0 })
	p.Run(jobFunc(func() { ran <- struct{}{} })) // still runs after stop
	<-ran
	eventually(t, time.Minute, "the writer to exit", func() bool { return stackCount(worker) == 0 })
}

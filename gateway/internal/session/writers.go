package session

import (
	"sync"
	"time"
)

// writerIdle is how long a writer goroutine waits for another
// connection's writer to run before it exits.
const writerIdle = 2 * time.Second

// writerJob is a connection's on-demand writer: it writes what is
// pending and returns.
type writerJob interface{ writeLoop() }

// WriterPool runs the on-demand writers of connections (SSE streams that
// left net/http, WebSockets) on goroutines that stay for writerIdle after
// their last job. A writer runs at once, on a goroutine waiting for work
// or else on a new one, never behind another writer (one stuck on a slow
// client included). While publications flow, writers thus neither start
// a goroutine nor grow a fresh stack for every batch; an idle server has
// no writer goroutine left.
type WriterPool struct {
	jobs chan writerJob // unbuffered: a job goes only to a waiting goroutine
	quit chan struct{}  // closed by Stop: waiting goroutines exit
}

func NewWriterPool() *WriterPool {
	return &WriterPool{jobs: make(chan writerJob), quit: make(chan struct{})}
}

// Run runs j's writeLoop on a waiting goroutine, or on a new one.
func (p *WriterPool) Run(j writerJob) {
	select {
	case p.jobs <- j:
	default:
		go p.work(j)
	}
}

// work runs j, then the jobs handed to it until it has waited writerIdle
// for one, or the server stops.
func (p *WriterPool) work(j writerJob) {
	j.writeLoop()
	idle := time.NewTimer(writerIdle)
	defer idle.Stop()
	for {
		select {
		case j := <-p.jobs:
			j.writeLoop()
			idle.Reset(writerIdle)
		case <-idle.C:
			return
		case <-p.quit:
			return
		}
	}
}

// Stop lets every waiting goroutine go; run still works after it.
func (p *WriterPool) Stop() { close(p.quit) }

// maxBatchBuf is the largest batch buffer kept for reuse: twice the size
// at which a sink writes a batch although more is to come.
const maxBatchBuf = 128 << 10

// batchBufs recycles the batch buffers of the transports' sinks: a
// connection holds one only while its writer runs.
var batchBufs = sync.Pool{New: func() any {
	b := make([]byte, 0, 4096)
	return &b
}}

// GetBatchBuf returns an empty batch buffer, pooled.
func GetBatchBuf() *[]byte { return batchBufs.Get().(*[]byte) }

// PutBatchBuf returns buf, taken from GetBatchBuf as *p, to the pool,
// unless it grew too large to keep.
func PutBatchBuf(p *[]byte, buf []byte) {
	if cap(buf) <= maxBatchBuf {
		*p = buf[:0]
		batchBufs.Put(p)
	}
}

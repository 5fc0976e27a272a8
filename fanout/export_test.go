package fanout

import (
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// What follows opens unexported parts of the package to its tests in
// package fanout_test, which use fanouttest (it imports fanout).

// NewMemoryBrokerClock is NewMemoryBroker reading the time from now.
var NewMemoryBrokerClock = newMemoryBroker

// WithDefaults is cfg with its defaults filled in.
func (cfg MemoryConfig) WithDefaults() MemoryConfig { return cfg.withDefaults() }

// WithSegmentSize is cfg whose history log starts a segment every n bytes
// (0: the default size).
func (cfg MemoryConfig) WithSegmentSize(n int) MemoryConfig {
	cfg.segmentSize = n
	return cfg
}

// SegmentSize is the segment size WithSegmentSize set (0: the default).
func (cfg MemoryConfig) SegmentSize() int { return cfg.segmentSize }

// SetClock makes b read the time from now; call it before b is used.
func (b *MemoryBroker) SetClock(now func() time.Time) { b.now = now }

// Compact snapshots b's history log now.
func (b *MemoryBroker) Compact() error { return b.compact() }

// FailHistoryLog fails b's history log as a failed write would.
func (b *MemoryBroker) FailHistoryLog(err error) {
	b.hlog.mu.Lock()
	defer b.hlog.mu.Unlock()
	b.hlog.fail("test", err)
}

// Counters are h's publication, delivery and resync counters.
func (h *Hub) Counters() (publications, deliveries, resyncs prometheus.Counter) {
	return h.m.publications, h.m.deliveries, h.m.resyncs
}

// BootID is the id of the running boot of the machine ("" where unknown).
var BootID = bootID

// LogFiles lists the names of dir's history log files, oldest first, and
// the path of its newest segment ("" with none).
func LogFiles(dir string) (names []string, lastSegment string, err error) {
	files, err := listLogFiles(dir)
	for _, f := range files {
		names = append(names, f.name)
		if !f.snap {
			lastSegment = filepath.Join(dir, f.name)
		}
	}
	return names, lastSegment, err
}

// OtherBoot makes a segment look written before the machine restarted.
func OtherBoot(seg []byte) []byte {
	seg[len(logMagic)+1] ^= 0x01 // the boot id's first character
	return seg
}

// LastRecordStart is the offset of the last record in a segment, or -1
// when it holds none.
func LastRecordStart(seg []byte) int {
	off := len(logMagic) + 1 + int(seg[len(logMagic)])
	last := -1
	for {
		payload, rest, err := nextFrame(seg[off:])
		if err != nil || payload == nil {
			return last
		}
		last = off
		off = len(seg) - len(rest)
	}
}

package fanout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The files of a history directory. Generation N is a snapshot
// history-N.snap (the streams at some moment after segment N began) and
// a segment history-N.seg (every record appended from N's start); a
// directory holds the newest snapshot and the segments from its
// generation on. Loading reads the newest snapshot, then those segments
// in order.
const (
	logPrefix  = "history-"
	segSuffix  = ".seg"
	snapSuffix = ".snap"
	tmpSuffix  = ".tmp"
)

// logKickBytes is how many pending bytes make the writer write before its
// interval ends, so a burst does not pile up in memory.
const logKickBytes = 1 << 20

// logCompactMin is the smallest segment that is compacted (rewritten as a
// snapshot of the retained history); a segment is compacted once it is
// also twice the last snapshot's size. A variable for tests.
var logCompactMin int64 = 64 << 20

// historyLog is a MemoryBroker's history on disk. Publish and stream
// resets append records to an in-memory buffer; a writer goroutine writes
// and fsyncs the buffer every sync interval, and Stop writes the rest and
// a close record. A node that stopped without that close record (killed,
// crashed, or the disk failed) cannot tell which channels lost their
// latest records, so its next start keeps none of the history: every
// channel starts over with a new epoch.
type historyLog struct {
	dir      string
	interval time.Duration
	log      *slog.Logger

	mu     sync.Mutex
	buf    []byte // records not yet written
	closed bool
	kick   chan struct{}

	wmu      sync.Mutex // serializes the writer's steps below
	f        *os.File   // the current segment
	gen      uint64
	segSize  int64
	snapSize int64
	spare    []byte
	failed   error // first write error: nothing more is written, no close record
}

// appendPub logs p, published at nowNs. Caller holds p's stream's mu.
func (l *historyLog) appendPub(p *Publication, nowNs int64) {
	l.mu.Lock()
	if !l.closed {
		l.buf = appendPubRecord(l.buf, p, nowNs)
		l.kickIfFull()
	}
	l.mu.Unlock()
}

// appendReset logs that key's stream (re)started at epoch with top. Caller
// holds the stream's mu, or has not yet made the stream visible.
func (l *historyLog) appendReset(key Key, epoch string, top uint64, nowNs int64) {
	l.mu.Lock()
	if !l.closed {
		l.buf = appendResetRecord(l.buf, key, epoch, top, nowNs)
		l.kickIfFull()
	}
	l.mu.Unlock()
}

// kickIfFull wakes the writer when enough is pending. Caller holds mu.
func (l *historyLog) kickIfFull() {
	if len(l.buf) >= logKickBytes {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
}

// take swaps the pending records out; close also ends appending. Caller
// holds wmu.
func (l *historyLog) take(close bool) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	data := l.buf
	l.buf = l.spare[:0]
	l.spare = nil
	if close {
		l.closed, l.buf = true, nil
	}
	return data
}

// fail records the first write error; from then on nothing is written
// and no close record marks the log clean. Caller holds wmu.
func (l *historyLog) fail(op string, err error) {
	if l.failed == nil {
		l.failed = fmt.Errorf("fanout: history log %s: %w", op, err)
		l.log.Error("history log write failed: the history is kept in memory only, and the next start keeps none of it (clients resuming then must refresh)",
			"dir", l.dir, "err", l.failed)
	}
}

// writeSync writes data (and a close record when close) to the segment
// and fsyncs it. Caller holds wmu.
func (l *historyLog) writeSync(data []byte, close bool) {
	if close {
		data = appendCloseRecord(data)
	}
	if l.failed == nil && len(data) > 0 {
		if _, err := l.f.Write(data); err != nil {
			l.fail("write", err)
		} else if err := l.f.Sync(); err != nil {
			l.fail("sync", err)
		}
		l.segSize += int64(len(data))
	}
	if cap(data) <= 4*logKickBytes {
		l.spare = data[:0]
	}
}

// flush writes and syncs what is pending.
func (l *historyLog) flush() {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.writeSync(l.take(false), false)
}

// close writes what is pending and the close record, and closes the
// segment. Appends after it are dropped.
func (l *historyLog) close() {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.writeSync(l.take(true), l.failed == nil)
	if l.f != nil {
		if err := l.f.Close(); err != nil && l.failed == nil {
			l.fail("close", err)
		}
		l.f = nil
	}
}

// needsCompaction reports whether the segment grew enough to be rewritten.
func (l *historyLog) needsCompaction() bool {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	return l.failed == nil && l.segSize >= max(logCompactMin, 2*l.snapSize)
}

// rotate ends the current segment (writing what is pending) and starts
// the next generation's; records appended from now go there. It returns
// the new generation. Caller holds wmu.
func (l *historyLog) rotate() (uint64, error) {
	l.writeSync(l.take(false), false)
	if l.failed != nil {
		return 0, l.failed
	}
	if l.f != nil {
		if err := l.f.Close(); err != nil {
			l.fail("close", err)
			return 0, l.failed
		}
		l.f = nil
	}
	gen := l.gen + 1
	f, err := os.OpenFile(l.path(gen, segSuffix), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		l.fail("create segment", err)
		return 0, l.failed
	}
	l.f, l.gen, l.segSize = f, gen, 0
	l.writeSync([]byte(logMagic), false)
	if err := syncDir(l.dir); err != nil {
		l.fail("sync directory", err)
	}
	return gen, l.failed
}

// writeSnapshot writes generation gen's snapshot with fill, makes it the
// current one and removes the files of older generations. fill appends
// records to a buffer and calls write whenever it wants it written.
// Caller holds wmu.
func (l *historyLog) writeSnapshot(gen uint64, fill func(buf []byte, write func([]byte) []byte) []byte) error {
	final := l.path(gen, snapSuffix)
	tmp := final + tmpSuffix
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		l.fail("create snapshot", err)
		return l.failed
	}
	var werr error
	size := int64(0)
	write := func(b []byte) []byte {
		if werr == nil {
			_, werr = f.Write(b)
			size += int64(len(b))
		}
		return b[:0]
	}
	buf := fill(append(make([]byte, 0, 64<<10), logMagic...), write)
	write(appendCloseRecord(buf))
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, final)
	}
	if werr == nil {
		werr = syncDir(l.dir)
	}
	if werr != nil {
		_ = os.Remove(tmp)
		l.fail("snapshot", werr)
		return l.failed
	}
	l.snapSize = size
	files, _ := listLogFiles(l.dir)
	for _, lf := range files {
		if lf.gen < gen {
			_ = os.Remove(filepath.Join(l.dir, lf.name))
		}
	}
	return nil
}

func (l *historyLog) path(gen uint64, suffix string) string {
	return filepath.Join(l.dir, fmt.Sprintf("%s%020d%s", logPrefix, gen, suffix))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}

// logFile is one file of a history directory.
type logFile struct {
	name string
	gen  uint64
	snap bool
}

// listLogFiles returns the directory's snapshots and segments, oldest
// generation first (a generation's snapshot before its segment), and
// removes leftover temporary files.
func listLogFiles(dir string) ([]logFile, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []logFile
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, logPrefix) {
			continue
		}
		if strings.HasSuffix(name, tmpSuffix) {
			_ = os.Remove(filepath.Join(dir, name))
			continue
		}
		rest, suffix := strings.TrimPrefix(name, logPrefix), filepath.Ext(name)
		if suffix != segSuffix && suffix != snapSuffix {
			continue
		}
		gen, err := strconv.ParseUint(strings.TrimSuffix(rest, suffix), 10, 64)
		if err != nil {
			continue
		}
		out = append(out, logFile{name: name, gen: gen, snap: suffix == snapSuffix})
	}
	slices.SortFunc(out, func(a, b logFile) int {
		if a.gen != b.gen {
			if a.gen < b.gen {
				return -1
			}
			return 1
		}
		if a.snap == b.snap {
			return 0
		}
		if a.snap {
			return -1
		}
		return 1
	})
	return out, nil
}

// loadedState is what a history directory held.
type loadedState struct {
	streams map[Key]*memStream
	clean   bool   // the last writer closed it: nothing was lost
	lastGen uint64 // the newest generation found
	files   int    // snapshots and segments read
}

// loadHistory reads dir's newest snapshot and the segments after it.
// historySize bounds each channel's replayed history.
func loadHistory(dir string, historySize int) (loadedState, error) {
	files, err := listLogFiles(dir)
	if err != nil {
		return loadedState{}, fmt.Errorf("fanout: history log: %w", err)
	}
	st := loadedState{streams: make(map[Key]*memStream), clean: true}
	from := -1 // index of the newest snapshot
	for i, f := range files {
		st.lastGen = max(st.lastGen, f.gen)
		if f.snap {
			from = i
		}
	}
	if from < 0 {
		from = 0
	}
	read := files[from:]
	if len(read) > 0 && !read[0].snap {
		// Segments with no snapshot before them: only the first
		// generation's, from an empty start, are complete.
		if read[0].gen != 1 {
			st.clean = false
		}
	}
	for i, f := range read {
		b, err := os.ReadFile(filepath.Join(dir, f.name))
		if err != nil {
			return loadedState{}, fmt.Errorf("fanout: history log: %w", err)
		}
		st.files++
		last, ok := replay(st.streams, b, historySize)
		// A snapshot ends with a close record; so does the last segment
		// of a log that was closed. A torn or unclosed last file lost
		// records we cannot name.
		if !ok || ((f.snap || i == len(read)-1) && last != recClose) {
			st.clean = false
		}
	}
	if !st.clean {
		st.streams = make(map[Key]*memStream)
	}
	return st, nil
}

// replay applies the records of one file to streams. It returns the kind
// of the last record and whether the file was whole.
func replay(streams map[Key]*memStream, b []byte, historySize int) (last byte, ok bool) {
	if !strings.HasPrefix(string(b[:min(len(b), len(logMagic))]), logMagic) {
		return 0, false
	}
	b = b[len(logMagic):]
	for {
		payload, rest, err := nextFrame(b)
		if err != nil {
			return last, false
		}
		if payload == nil {
			return last, true
		}
		b = rest
		rec, err := decodeRecord(payload)
		if err != nil {
			return last, false
		}
		last = rec.kind
		applyRecord(streams, rec, historySize)
	}
}

// applyRecord replays one record. A file read after a snapshot may repeat
// what the snapshot holds: a publication at or below its stream's top, or
// of another epoch, is one already applied (a reset record before it
// restarts the stream, and the publications after it refill it).
func applyRecord(streams map[Key]*memStream, rec logRecord, historySize int) {
	switch rec.kind {
	case recReset:
		s := &memStream{epoch: rec.epoch, top: rec.offset}
		s.lastActive.Store(rec.lastActive)
		streams[rec.key] = s
	case recPub:
		s := streams[rec.key]
		if s == nil || s.epoch != rec.epoch || rec.offset <= s.top {
			return
		}
		if rec.offset != s.top+1 {
			delete(streams, rec.key) // a gap: the channel starts over
			return
		}
		s.top = rec.offset
		s.lastActive.Store(rec.lastActive)
		s.append(Publication{Message: rec.msg, Position: Position{Offset: rec.offset, Epoch: s.epoch}}, historySize)
	}
}

// openHistory loads dir into b and starts a new generation holding what
// it kept. Called by NewMemoryBroker.
func (b *MemoryBroker) openHistory() error {
	dir := b.cfg.HistoryDir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("fanout: history log: %w", err)
	}
	st, err := loadHistory(dir, b.cfg.HistorySize)
	if err != nil {
		return err
	}
	nowNs, ttl := b.now().UnixNano(), int64(b.cfg.HistoryTTL)
	for k, s := range st.streams {
		if nowNs-s.lastActive.Load() <= ttl {
			b.channels[k] = s
		}
	}
	if len(b.channels) > b.cfg.MaxChannels {
		b.evictLocked(nowNs)
	}
	if st.files > 0 && !st.clean {
		b.cfg.Logger.Warn("history log was not closed cleanly (the node was killed or crashed): no channel history kept, resuming clients must refresh",
			"dir", dir)
	}
	l := &historyLog{dir: dir, interval: b.cfg.HistorySyncInterval, log: b.cfg.Logger, kick: make(chan struct{}, 1), gen: st.lastGen}
	b.hlog = l
	l.wmu.Lock()
	defer l.wmu.Unlock()
	gen, err := l.rotate()
	if err == nil {
		err = l.writeSnapshot(gen, b.snapshot)
	}
	if err != nil {
		if l.f != nil {
			_ = l.f.Close()
		}
		return err
	}
	b.cfg.Logger.Info("history log opened", "dir", dir, "channels", len(b.channels), "clean", st.clean || st.files == 0)
	return nil
}

// snapshot appends every stream's state to buf: a reset record at the
// offset before its oldest retained publication, then those publications.
func (b *MemoryBroker) snapshot(buf []byte, write func([]byte) []byte) []byte {
	type entry struct {
		key Key
		s   *memStream
	}
	b.mu.RLock()
	all := make([]entry, 0, len(b.channels))
	for k, s := range b.channels {
		all = append(all, entry{k, s})
	}
	b.mu.RUnlock()
	for _, e := range all {
		s := e.s
		s.mu.Lock()
		if !s.evicted {
			buf = appendResetRecord(buf, e.key, s.epoch, s.top-uint64(s.ring.n), s.lastActive.Load())
			for i := range s.ring.n {
				buf = appendPubRecord(buf, s.ring.at(i), s.lastActive.Load())
			}
		}
		s.mu.Unlock()
		if len(buf) >= logKickBytes {
			buf = write(buf)
		}
	}
	return buf
}

// compact starts a new generation: a snapshot of the retained history,
// and a segment for what follows.
func (b *MemoryBroker) compact() error {
	l := b.hlog
	l.wmu.Lock()
	defer l.wmu.Unlock()
	gen, err := l.rotate()
	if err != nil {
		return err
	}
	return l.writeSnapshot(gen, b.snapshot)
}

// logLoop writes and syncs the history log every sync interval (sooner
// when much is pending) and compacts it when it grew, until ctx ends.
func (b *MemoryBroker) logLoop(ctx context.Context) {
	l := b.hlog
	t := time.NewTicker(l.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-l.kick:
		}
		l.flush()
		if l.needsCompaction() {
			_ = b.compact() // a failure is logged and stops the log
		}
	}
}

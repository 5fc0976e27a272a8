package fanout

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// errNoHistoryLog is the error of a history log where none can be kept.
var errNoHistoryLog = errors.New("the history log needs Linux")

// logSegmentSize is the size of a segment file, reserved on the disk when
// the segment is created (a record larger than it gets a segment of its
// own size). A variable for tests.
var logSegmentSize = 64 << 20

// logTailReserve is the end of every segment kept free for its closing
// record (recClose or recFail).
const logTailReserve = 16

// logCompactMin is the least a log grows between snapshots before it is
// compacted (rewritten as a snapshot of the retained history); it is
// compacted once it also grew twice the last snapshot's size. A variable
// for tests.
var logCompactMin int64 = 256 << 20

// historyLog is a MemoryBroker's history on disk. Publications and stream
// resets are copied, as records, into the current segment file through a
// shared memory mapping: no system call per record, and what is copied is
// in the kernel's page cache at once, so it survives the process however
// it ends (SIGKILL, a panic, the OOM killer) for as long as the machine
// runs. Stop syncs every segment to the disk and writes a close record.
//
// Loading keeps the history when the log was closed, or when it was not
// but the machine has not restarted since it was written (same boot id):
// then the page cache held all of it. A record cut short by the kill was
// in a Publish that never returned, so no client saw its offset. After a
// machine restart, an unclosed log may have lost any of its pages, on
// channels it cannot name: every channel starts over with a new epoch.
type historyLog struct {
	dir     string
	boot    string // this boot's id; "" = unknown
	segSize int    // logSegmentSize, or a test's
	log     *slog.Logger

	mu       sync.Mutex
	f        *os.File
	m        []byte // the current segment, mapped; nil once closed or failed
	pos      int    // bytes used in m
	gen      uint64
	failed   error
	written  int64      // segment bytes since the last snapshot
	snapSize int64      // the last snapshot's size
	retired  []*os.File // rotated segments for the writer to sync and close

	kick   chan struct{}
	snapMu sync.Mutex // one snapshot at a time
}

// appendPub logs p, published at nowNs. Caller holds p's stream's mu.
func (l *historyLog) appendPub(p *Publication, nowNs int64) {
	buf := recordBufs.Get().(*[]byte)
	*buf = appendPubRecord((*buf)[:0], p, nowNs)
	l.put(*buf)
	recordBufs.Put(buf)
}

// appendReset logs that key's stream (re)started at epoch with top. Caller
// holds the stream's mu, or has not yet made the stream visible.
func (l *historyLog) appendReset(key Key, epoch string, top uint64, nowNs int64) {
	buf := recordBufs.Get().(*[]byte)
	*buf = appendResetRecord((*buf)[:0], key, epoch, top, nowNs)
	l.put(*buf)
	recordBufs.Put(buf)
}

// recordBufs holds the buffers records are encoded in before they are
// copied into the segment, so that the log's lock is held only to copy.
var recordBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// put copies the record rec into the segment (a new one when it does not
// fit), its frame header last: a process killed while copying leaves the
// record's length zero, which reads as the end of the segment.
func (l *historyLog) put(rec []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		return
	}
	if l.pos+len(rec) > len(l.m)-logTailReserve {
		if err := l.rotate(len(rec)); err != nil {
			return
		}
	}
	writeRecord(l.m[l.pos:], rec)
	l.pos += len(rec)
	l.written += int64(len(rec))
	if l.written >= max(logCompactMin, 2*l.snapSize) {
		l.wake()
	}
}

func (l *historyLog) wake() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// writeRecord copies the frames rec into m: the payloads, then each
// header's checksum, then its length, so a process killed while copying
// leaves the frame's length zero.
func writeRecord(m, rec []byte) {
	for len(rec) > 0 {
		n := 8 + int(binary.LittleEndian.Uint32(rec))
		copy(m[8:], rec[8:n])
		copy(m[4:8], rec[4:8])
		copy(m[:4], rec[:4])
		m, rec = m[n:], rec[n:]
	}
}

// rotate ends the current segment and starts the next generation's, with
// room for a record of need bytes. The writer syncs and closes the old
// one. Caller holds mu.
func (l *historyLog) rotate(need int) error {
	gen := l.gen + 1
	size := max(l.segSize, need+logTailReserve+len(logMagic)+1+len(l.boot))
	f, err := os.OpenFile(l.path(gen, segSuffix), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	var m []byte
	if err == nil {
		if m, err = mapFile(f, size); err == nil {
			// The segment must outlive a crash: a log whose newest
			// segment vanished would pass for one that ends earlier.
			err = syncDir(l.dir)
		}
		if err != nil {
			if m != nil {
				_ = unmapFile(m)
			}
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}
	if err != nil {
		l.fail("new segment", err)
		return l.failed
	}
	if l.m != nil {
		_ = unmapFile(l.m) // the pages stay in the page cache
		l.retired = append(l.retired, l.f)
		l.wake()
	}
	l.f, l.m, l.gen = f, m, gen
	l.pos = copy(m, segmentHeader(l.boot))
	return nil
}

// segmentHeader starts a segment: logMagic and the boot id it was written
// in (a length byte, then the id).
func segmentHeader(boot string) []byte {
	return append(append([]byte(logMagic), byte(len(boot))), boot...)
}

// fail stops logging after an error: the current segment gets a failure
// record (so no later start takes the log as whole) and nothing more is
// written. Caller holds mu.
func (l *historyLog) fail(op string, err error) {
	if l.failed != nil {
		return
	}
	l.failed = fmt.Errorf("fanout: history log %s: %w", op, err)
	l.log.Error("history log failed: the history is kept in memory only, and the next start keeps none of it (clients resuming then must refresh)",
		"dir", l.dir, "err", l.failed)
	if l.m != nil {
		rec := appendFailRecord(nil)
		writeRecord(l.m[l.pos:], rec)
		l.pos += len(rec)
		_ = unmapFile(l.m)
		l.m = nil
		l.retired = append(l.retired, l.f)
		l.f = nil
	}
}

// syncRetired syncs and closes the rotated segments.
func (l *historyLog) syncRetired() {
	l.mu.Lock()
	files := l.retired
	l.retired = nil
	l.mu.Unlock()
	for _, f := range files {
		err := f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			l.mu.Lock()
			l.fail("sync", err)
			l.mu.Unlock()
		}
	}
}

// close syncs every segment, writes the close record to the current one
// and syncs it; appends after it are dropped. After a failure there is no
// close record.
func (l *historyLog) close() {
	l.syncRetired()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m != nil {
		rec := appendCloseRecord(nil)
		writeRecord(l.m[l.pos:], rec)
		l.pos += len(rec)
		err := l.f.Sync() // writes back the mapping's dirty pages
		_ = unmapFile(l.m)
		l.m = nil
		if cerr := l.f.Close(); err == nil {
			err = cerr
		}
		l.f = nil
		if err != nil {
			l.failed = fmt.Errorf("fanout: history log close: %w", err)
			l.log.Error("history log close failed: the next start keeps no history", "dir", l.dir, "err", l.failed)
			_ = os.Remove(l.path(l.gen, segSuffix)) // so it cannot pass for whole
		}
	}
	for _, f := range l.retired {
		_ = f.Close()
	}
	l.retired = nil
}

// needsCompaction reports whether the log grew enough to be rewritten.
func (l *historyLog) needsCompaction() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m != nil && l.written >= max(logCompactMin, 2*l.snapSize)
}

// writeSnapshot writes generation gen's snapshot with fill, makes it the
// current one and removes the files of older generations. fill appends
// records to a buffer and calls write whenever it wants it written.
// Caller holds snapMu.
func (l *historyLog) writeSnapshot(gen uint64, fill func(buf []byte, write func([]byte) []byte) []byte) error {
	final := l.path(gen, snapSuffix)
	tmp := final + tmpSuffix
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("fanout: history log snapshot: %w", err)
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
	buf := fill(append(make([]byte, 0, 64<<10), segmentHeader("")...), write)
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
		return fmt.Errorf("fanout: history log snapshot: %w", werr)
	}
	l.mu.Lock()
	l.snapSize = size
	l.mu.Unlock()
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
	kept    string // why the history was kept: "closed" or "same boot"; "" = it was not
	lastGen uint64 // the newest generation found
	files   int    // snapshots and segments read
}

// loadHistory reads dir's newest snapshot and the segments after it, and
// keeps what they hold when the log was closed, or was written since the
// machine's last boot (boot). historySize bounds each channel's history.
func loadHistory(dir, boot string, historySize int) (loadedState, error) {
	files, err := listLogFiles(dir)
	if err != nil {
		return loadedState{}, fmt.Errorf("fanout: history log: %w", err)
	}
	st := loadedState{streams: make(map[Key]*memStream)}
	from := 0 // index of the newest snapshot
	for i, f := range files {
		st.lastGen = max(st.lastGen, f.gen)
		if f.snap {
			from = i
		}
	}
	read := files[from:]
	whole := true    // every file read to its end, nothing failed
	sameBoot := true // every segment written since this boot
	var last byte    // the last record of the last file
	for i, f := range read {
		if i == 0 && !f.snap && f.gen != 1 {
			whole = false // segments without the snapshot before them
		}
		b, err := os.ReadFile(filepath.Join(dir, f.name))
		if err != nil {
			return loadedState{}, fmt.Errorf("fanout: history log: %w", err)
		}
		st.files++
		r := replay(st.streams, b, historySize)
		whole = whole && r.ok && !r.failed
		if f.snap {
			whole = whole && r.last == recClose
		} else {
			sameBoot = sameBoot && boot != "" && r.boot == boot
		}
		last = r.last
	}
	if len(read) > 0 && read[len(read)-1].snap {
		whole = false // every snapshot has its segment: this one's is lost
	}
	switch {
	case !whole:
	case last == recClose:
		st.kept = "closed"
	case sameBoot:
		st.kept = "same boot"
	}
	if st.kept == "" {
		st.streams = make(map[Key]*memStream)
	}
	return st, nil
}

// replayed is what replay found in a file.
type replayed struct {
	boot   string // the boot id in its header
	last   byte   // its last record's kind
	ok     bool   // no torn or corrupt record before its end
	failed bool   // it holds a failure record
}

// replay applies the records of one file to streams.
func replay(streams map[Key]*memStream, b []byte, historySize int) replayed {
	var r replayed
	if len(b) < len(logMagic)+1 || string(b[:len(logMagic)]) != logMagic {
		return r
	}
	n := int(b[len(logMagic)])
	b = b[len(logMagic)+1:]
	if len(b) < n {
		return r
	}
	r.boot, b = string(b[:n]), b[n:]
	for {
		payload, rest, err := nextFrame(b)
		if err != nil {
			return r
		}
		if payload == nil {
			r.ok = true
			return r
		}
		b = rest
		rec, err := decodeRecord(payload)
		if err != nil {
			return r
		}
		r.last = rec.kind
		r.failed = r.failed || rec.kind == recFail
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
		s := &memStream{key: rec.key, epoch: rec.epoch, top: rec.offset}
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
		s.append(&Publication{Message: rec.msg, Position: Position{Offset: rec.offset, Epoch: s.epoch}}, historySize)
	}
}

// openHistory loads dir into b and starts a new generation holding what
// it kept. Called by NewMemoryBroker.
func (b *MemoryBroker) openHistory() error {
	dir := b.cfg.HistoryDir
	if !HistoryLogSupported {
		return fmt.Errorf("fanout: history log %s: %w", dir, errNoHistoryLog)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("fanout: history log: %w", err)
	}
	boot := bootID()
	st, err := loadHistory(dir, boot, b.cfg.HistorySize)
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
	if st.files > 0 && st.kept == "" {
		b.cfg.Logger.Warn("history log not kept: it was not closed and the machine restarted since (or it is damaged), so it may have lost records on any channel; every channel starts over with a new epoch and resuming clients must refresh",
			"dir", dir)
	}
	l := &historyLog{dir: dir, boot: boot, segSize: cmp.Or(b.cfg.segmentSize, logSegmentSize), log: b.cfg.Logger, kick: make(chan struct{}, 1), gen: st.lastGen}
	l.mu.Lock()
	err = l.rotate(0)
	l.mu.Unlock()
	if err != nil {
		return err
	}
	b.hlog = l
	if err := l.writeSnapshot(l.gen, b.snapshot); err != nil {
		l.close()
		return err
	}
	b.cfg.Logger.Info("history log opened", "dir", dir, "channels", len(b.channels), "kept", st.kept)
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
				p := s.pub(s.ring.at(i))
				buf = appendPubRecord(buf, &p, s.lastActive.Load())
			}
		}
		s.mu.Unlock()
		if len(buf) >= 1<<20 {
			buf = write(buf)
		}
	}
	return buf
}

// compact starts a new generation: a snapshot of the retained history,
// and a segment for what follows.
func (b *MemoryBroker) compact() error {
	l := b.hlog
	l.snapMu.Lock()
	defer l.snapMu.Unlock()
	l.mu.Lock()
	if l.m == nil {
		l.mu.Unlock()
		return l.failed
	}
	err := l.rotate(0)
	gen := l.gen
	l.written = 0
	l.mu.Unlock()
	if err != nil {
		return err
	}
	return l.writeSnapshot(gen, b.snapshot)
}

// logLoop syncs and closes rotated segments and compacts the log when it
// grew, until ctx ends.
func (b *MemoryBroker) logLoop(ctx context.Context) {
	l := b.hlog
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.kick:
		}
		l.syncRetired()
		if l.needsCompaction() {
			if err := b.compact(); err != nil {
				l.log.Error("history log compaction failed; it is retried when the log grows again", "dir", l.dir, "err", err)
			}
		}
	}
}

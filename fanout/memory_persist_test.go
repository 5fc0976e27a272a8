package fanout

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// discard is a Handler that drops what it is handed.
type discard struct{}

func (discard) HandlePublication(Publication) {}

// openLogged starts a MemoryBroker on dir with a handler that drops what
// it is handed; the test's cleanup stops it (a second Stop is harmless).
func openLogged(t *testing.T, dir string, cfg MemoryConfig) *MemoryBroker {
	t.Helper()
	cfg.HistoryDir = dir
	cfg.segmentSize = cmp.Or(cfg.segmentSize, 64<<10) // small files to copy and edit
	b, err := NewMemoryBroker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	if err := b.Start(testCtx(t), discard{}); err != nil {
		t.Fatal(err)
	}
	return b
}

// samePublications fails unless got are want, field by field.
func samePublications(t *testing.T, what string, got, want []Publication) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d publications %v, want %d %v", what, len(got), offsets(got), len(want), offsets(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("%s #%d:\n got %+v\nwant %+v", what, i, got[i], want[i])
		}
	}
}

// TestMemoryHistorySurvivesStop: after Stop, a broker on the same
// directory answers every resume inside the window with recovered and
// the same publications (epoch, offsets, ids, bytes), also from an empty
// channel's position and across compactions, and carries on the offsets.
func TestMemoryHistorySurvivesStop(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := MemoryConfig{HistorySize: 5}
	a := openLogged(t, dir, cfg)
	k1, k2, empty := Key{"acme", "orders/1"}, Key{"acme", "orders/2"}, Key{"globex", "quiet"}
	var pubs1, pubs2 []Publication
	for i := range 8 {
		m := msg(k1, fmt.Sprintf("a%d", i))
		if i == 3 {
			m.Freshness = []byte(`{"mode": "coalesce"}`)
		}
		pubs1 = append(pubs1, mustPublish(t, a, m))
		if i == 4 {
			if err := a.compact(); err != nil { // snapshot mid-stream
				t.Fatal(err)
			}
		}
	}
	pubs2 = append(pubs2, mustPublish(t, a, msg(k2, "b0")))
	quiet := mustRecover(t, a, empty, Position{})
	a.Stop()

	b := openLogged(t, dir, cfg)
	r := mustRecover(t, b, k1, pubs1[2].Position)
	if !r.Recovered || r.Top != pubs1[7].Position {
		t.Fatalf("resume after restart: recovered %v top %v, want true %v", r.Recovered, r.Top, pubs1[7].Position)
	}
	samePublications(t, "k1 after restart", r.Publications, pubs1[3:])
	if r := mustRecover(t, b, k1, pubs1[1].Position); r.Recovered {
		t.Fatalf("resume from before the window (size 5): recovered %v", offsets(r.Publications))
	}
	samePublications(t, "k2 after restart", mustRecover(t, b, k2, Position{Epoch: pubs2[0].Epoch}).Publications, pubs2)
	if r := mustRecover(t, b, empty, quiet.Top); !r.Recovered || r.Top != quiet.Top {
		t.Fatalf("empty channel after restart: %+v, want recovered at %v", r, quiet.Top)
	}
	next := mustPublish(t, b, msg(k1, "a8"))
	if next.Epoch != pubs1[0].Epoch || next.Offset != 9 {
		t.Fatalf("first publication after restart at %v, want 9 in %s", next.Position, pubs1[0].Epoch)
	}
	pubs1 = append(pubs1, next)
	b.Stop()

	// A third start, with a smaller window, keeps the newest of it.
	c := openLogged(t, dir, MemoryConfig{HistorySize: 2})
	samePublications(t, "k1 after second restart", mustRecover(t, c, k1, pubs1[6].Position).Publications, pubs1[7:])
	if r := mustRecover(t, c, k1, pubs1[5].Position); r.Recovered {
		t.Fatal("resume from before the smaller window recovered")
	}
}

// TestMemoryHistoryCompactsWhilePublishing: compactions racing with
// publications on many channels lose and repeat nothing.
func TestMemoryHistoryCompactsWhilePublishing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := MemoryConfig{HistorySize: 1000, segmentSize: 4096} // a segment every ~30 publications
	a := openLogged(t, dir, cfg)
	const channels, each = 8, 200
	want := make([][]Publication, channels)
	var wg sync.WaitGroup
	for c := range channels {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := Key{"acme", fmt.Sprintf("c%d", c)}
			for i := range each {
				p, err := a.Publish(testCtx(t), msg(k, fmt.Sprintf("m%d", i)))
				if err != nil {
					t.Error(err)
					return
				}
				want[c] = append(want[c], p)
			}
		}()
	}
	compactions := 0
	for done := false; !done; compactions++ {
		if err := a.compact(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-waitGroupDone(&wg):
			done = true
		default:
		}
	}
	a.Stop()
	b := openLogged(t, dir, cfg)
	for c := range channels {
		k := Key{"acme", fmt.Sprintf("c%d", c)}
		r := mustRecover(t, b, k, Position{Epoch: want[c][0].Epoch})
		if !r.Recovered {
			t.Fatalf("channel %d not recovered after %d compactions", c, compactions)
		}
		samePublications(t, k.String(), r.Publications, want[c])
	}
	files, err := listLogFiles(dir)
	if err != nil || len(files) != 2 {
		t.Fatalf("files after reopening: %v %v, want one snapshot and one segment", files, err)
	}
}

func waitGroupDone(wg *sync.WaitGroup) <-chan struct{} {
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	return ch
}

// copyDir copies the files of src into a new directory: the disk as a
// process killed at that moment would leave it.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// lastSegment is the path of dir's newest segment.
func lastSegment(t *testing.T, dir string) string {
	t.Helper()
	files, err := listLogFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(files) - 1; i >= 0; i-- {
		if !files[i].snap {
			return filepath.Join(dir, files[i].name)
		}
	}
	t.Fatalf("no segment in %v", files)
	return ""
}

// editSegment rewrites dir's newest segment with edit.
func editSegment(t *testing.T, dir string, edit func(b []byte) []byte) {
	t.Helper()
	seg := lastSegment(t, dir)
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(seg, edit(b), 0o600); err != nil {
		t.Fatal(err)
	}
}

// otherBoot makes a segment look written before the machine restarted.
func otherBoot(b []byte) []byte {
	b[len(logMagic)+1] ^= 0x01 // the boot id's first character
	return b
}

// lastRecordStart is the offset of the last record in a segment.
func lastRecordStart(t *testing.T, b []byte) int {
	t.Helper()
	off := len(logMagic) + 1 + int(b[len(logMagic)])
	last := -1
	for {
		payload, rest, err := nextFrame(b[off:])
		if err != nil || payload == nil {
			break
		}
		last = off
		off = len(b) - len(rest)
	}
	if last < 0 {
		t.Fatal("segment holds no record")
	}
	return last
}

// TestMemoryHistoryAfterKill: a log its process left without closing
// (SIGKILL: what was copied into the mapping is in the page cache) is
// kept while the machine has not restarted, up to the last whole record;
// a record cut short was in a Publish that never returned, so its offset
// is given again. Written before the machine restarted, damaged, missing
// its newest segment, or after a write failure, it may have lost records on any channel: every channel
// starts over with a new epoch, never recovered across a gap.
func TestMemoryHistoryAfterKill(t *testing.T) {
	t.Parallel()
	if bootID() == "" {
		t.Fatal("no boot id on this machine")
	}
	dir := t.TempDir()
	a := openLogged(t, dir, MemoryConfig{})
	k1, k2 := Key{"acme", "a"}, Key{"acme", "b"}
	p1 := mustPublish(t, a, msg(k1, "m1"))
	p2 := mustPublish(t, a, msg(k2, "m2"))
	p3 := mustPublish(t, a, msg(k2, "m3"))
	killed := copyDir(t, dir) // the files as a SIGKILL now leaves them

	cut := copyDir(t, dir) // killed while appending m3: its length not yet written
	editSegment(t, cut, func(b []byte) []byte {
		at := lastRecordStart(t, b)
		clear(b[at : at+4])
		return b
	})
	rebooted := copyDir(t, dir)
	editSegment(t, rebooted, otherBoot)
	damaged := copyDir(t, dir) // a bit flipped inside the last record
	editSegment(t, damaged, func(b []byte) []byte {
		b[lastRecordStart(t, b)+12] ^= 0x40
		return b
	})

	lost := copyDir(t, dir) // the newest segment did not survive
	if err := os.Remove(lastSegment(t, lost)); err != nil {
		t.Fatal(err)
	}

	a.hlog.mu.Lock()
	a.hlog.fail("test", errors.New("disk gone"))
	a.hlog.mu.Unlock()
	mustPublish(t, a, msg(k1, "unlogged"))
	a.Stop()
	failed := dir

	b := openLogged(t, killed, MemoryConfig{})
	samePublications(t, "k1 after kill", mustRecover(t, b, k1, Position{Epoch: p1.Epoch}).Publications, []Publication{p1})
	samePublications(t, "k2 after kill", mustRecover(t, b, k2, Position{Epoch: p2.Epoch}).Publications, []Publication{p2, p3})
	b.Stop()
	// The start after the kill wrote a whole log again.
	c := openLogged(t, killed, MemoryConfig{})
	samePublications(t, "k2 after kill and restart", mustRecover(t, c, k2, p2.Position).Publications, []Publication{p3})

	d := openLogged(t, cut, MemoryConfig{})
	r := mustRecover(t, d, k2, p2.Position)
	if !r.Recovered || r.Top != p2.Position || len(r.Publications) != 0 {
		t.Fatalf("killed while appending: %+v, want recovered at %v", r, p2.Position)
	}
	if p := mustPublish(t, d, msg(k2, "m3 again")); p.Position != p3.Position {
		t.Fatalf("the cut record's offset: %v, want %v given again", p.Position, p3.Position)
	}

	for name, dir := range map[string]string{"rebooted": rebooted, "damaged": damaged, "lost": lost, "failed": failed} {
		e := openLogged(t, dir, MemoryConfig{})
		for _, p := range []Publication{p1, p2} {
			r := mustRecover(t, e, p.Key, Position{Epoch: p.Epoch})
			if r.Recovered || r.Top.Epoch == p.Epoch || r.Top.Offset != 0 {
				t.Fatalf("%s: %v: %+v, want not recovered, new epoch", name, p.Key, r)
			}
		}
		if p := mustPublish(t, e, msg(k1, "again")); p.Offset != 1 || p.Epoch == p1.Epoch {
			t.Fatalf("%s: publication after the history was dropped at %v", name, p.Position)
		}
	}
}

// TestMemoryHistoryClosedBeforeReboot: a closed log is kept after the
// machine restarted, and a publication larger than a segment gets one of
// its own.
func TestMemoryHistoryClosedBeforeReboot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := MemoryConfig{segmentSize: 4096}
	a := openLogged(t, dir, cfg)
	k := Key{"acme", "big"}
	small := mustPublish(t, a, msg(k, "small"))
	m := msg(k, "big")
	m.Data = []byte(`"` + strings.Repeat("x", 10000) + `"`)
	big := mustPublish(t, a, m)
	a.Stop()
	editSegment(t, dir, otherBoot)
	b := openLogged(t, dir, cfg)
	samePublications(t, "after reboot", mustRecover(t, b, k, Position{Epoch: small.Epoch}).Publications, []Publication{small, big})
}

// TestMemoryHistoryTTLAcrossRestart: a stream reset by its TTL is logged,
// and a channel idle past the TTL while the node was down is not loaded.
func TestMemoryHistoryTTLAcrossRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clock := &fakeClock{}
	clock.ns.Store(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	cfg := MemoryConfig{HistoryTTL: time.Hour, HistoryDir: dir, segmentSize: 64 << 10}
	open := func() *MemoryBroker {
		b, err := newMemoryBroker(cfg, clock.now)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Stop)
		return b
	}
	ka, kb := Key{"acme", "a"}, Key{"acme", "b"}
	a := open()
	old := mustPublish(t, a, msg(ka, "old"))
	clock.advance(2 * time.Hour)
	fresh := mustPublish(t, a, msg(ka, "fresh")) // reset: new epoch, offset 1
	stale := mustPublish(t, a, msg(kb, "stale"))
	if fresh.Epoch == old.Epoch || fresh.Offset != 1 {
		t.Fatalf("publication after the TTL at %v", fresh.Position)
	}
	a.Stop()

	b := open()
	r := mustRecover(t, b, ka, Position{Epoch: fresh.Epoch})
	if !r.Recovered || len(r.Publications) != 1 || r.Publications[0].ID != "fresh" {
		t.Fatalf("reset channel after restart: %+v", r)
	}
	b.Stop()

	clock.advance(61 * time.Minute)
	c := open()
	if n := c.Channels(); n != 0 {
		t.Fatalf("%d channels loaded after the TTL passed while down, want 0", n)
	}
	if r := mustRecover(t, c, kb, stale.Position); r.Recovered {
		t.Fatal("channel idle past its TTL recovered")
	}
}

// BenchmarkMemoryPublish measures publications with and without the
// history log, over 1,000 channels, from many goroutines.
func BenchmarkMemoryPublish(b *testing.B) {
	for _, logged := range []bool{false, true} {
		b.Run(fmt.Sprintf("log=%v", logged), func(b *testing.B) {
			cfg := MemoryConfig{}
			if logged {
				cfg.HistoryDir = b.TempDir()
			}
			br, err := NewMemoryBroker(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer br.Stop()
			msgs := make([]Message, 1000)
			for i := range msgs {
				msgs[i] = msg(Key{"acme", fmt.Sprintf("orders/%d", i)}, fmt.Sprintf("m%d", i))
			}
			ctx := context.Background()
			var next atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(16) // as the Worker publishes many channels at once
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := br.Publish(ctx, msgs[next.Add(1)%int64(len(msgs))]); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

package fanout_test

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/fanout/fanouttest"
)

// discard is a Handler that drops what it is handed.
type discard struct{}

func (discard) HandlePublication(fanout.Publication) {}

// openLogged starts a fanout.MemoryBroker on dir with a handler that drops what
// it is handed; the test's cleanup stops it (a second Stop is harmless).
func openLogged(t *testing.T, dir string, cfg fanout.MemoryConfig) *fanout.MemoryBroker {
	t.Helper()
	cfg.HistoryDir = dir
	cfg = cfg.WithSegmentSize(cmp.Or(cfg.SegmentSize(), 64<<10)) // small files to copy and edit
	b, err := fanout.NewMemoryBroker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	if err := b.Start(fanouttest.Context(t), discard{}); err != nil {
		t.Fatal(err)
	}
	return b
}

// samePublications fails unless got are want, field by field.
func samePublications(t *testing.T, what string, got, want []fanout.Publication) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d publications %v, want %d %v", what, len(got), fanouttest.Offsets(got), len(want), fanouttest.Offsets(want))
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
	cfg := fanout.MemoryConfig{HistorySize: 5}
	a := openLogged(t, dir, cfg)
	k1, k2, empty := acme("orders/1"), acme("orders/2"), fanout.Key{Tenant: "globex", Channel: "quiet"}
	var pubs1, pubs2 []fanout.Publication
	for i := range 8 {
		m := fanouttest.Msg(k1, fmt.Sprintf("a%d", i))
		if i == 3 {
			m.Freshness = []byte(`{"mode": "coalesce"}`)
		}
		pubs1 = append(pubs1, fanouttest.MustPublish(t, a, m))
		if i == 4 {
			if err := a.Compact(); err != nil { // snapshot mid-stream
				t.Fatal(err)
			}
		}
	}
	pubs2 = append(pubs2, fanouttest.MustPublish(t, a, fanouttest.Msg(k2, "b0")))
	quiet := fanouttest.MustRecover(t, a, empty, fanout.Position{})
	a.Stop()

	b := openLogged(t, dir, cfg)
	r := fanouttest.MustRecover(t, b, k1, pubs1[2].Position)
	if !r.Recovered || r.Top != pubs1[7].Position {
		t.Fatalf("resume after restart: recovered %v top %v, want true %v", r.Recovered, r.Top, pubs1[7].Position)
	}
	samePublications(t, "k1 after restart", r.Publications, pubs1[3:])
	if r := fanouttest.MustRecover(t, b, k1, pubs1[1].Position); r.Recovered {
		t.Fatalf("resume from before the window (size 5): recovered %v", fanouttest.Offsets(r.Publications))
	}
	samePublications(t, "k2 after restart", fanouttest.MustRecover(t, b, k2, fanout.Position{Epoch: pubs2[0].Epoch}).Publications, pubs2)
	if r := fanouttest.MustRecover(t, b, empty, quiet.Top); !r.Recovered || r.Top != quiet.Top {
		t.Fatalf("empty channel after restart: %+v, want recovered at %v", r, quiet.Top)
	}
	next := fanouttest.MustPublish(t, b, fanouttest.Msg(k1, "a8"))
	if next.Epoch != pubs1[0].Epoch || next.Offset != 9 {
		t.Fatalf("first publication after restart at %v, want 9 in %s", next.Position, pubs1[0].Epoch)
	}
	pubs1 = append(pubs1, next)
	b.Stop()

	// A third start, with a smaller window, keeps the newest of it.
	c := openLogged(t, dir, fanout.MemoryConfig{HistorySize: 2})
	samePublications(t, "k1 after second restart", fanouttest.MustRecover(t, c, k1, pubs1[6].Position).Publications, pubs1[7:])
	if r := fanouttest.MustRecover(t, c, k1, pubs1[5].Position); r.Recovered {
		t.Fatal("resume from before the smaller window recovered")
	}
}

// TestMemoryHistoryCompactsWhilePublishing: compactions racing with
// publications on many channels lose and repeat nothing.
func TestMemoryHistoryCompactsWhilePublishing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := fanout.MemoryConfig{HistorySize: 1000}.WithSegmentSize(4096) // a segment every ~30 publications
	a := openLogged(t, dir, cfg)
	const channels, each = 8, 200
	want := make([][]fanout.Publication, channels)
	var wg sync.WaitGroup
	for c := range channels {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := acme(fmt.Sprintf("c%d", c))
			for i := range each {
				p, err := a.Publish(fanouttest.Context(t), fanouttest.Msg(k, fmt.Sprintf("m%d", i)))
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
		if err := a.Compact(); err != nil {
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
		k := acme(fmt.Sprintf("c%d", c))
		r := fanouttest.MustRecover(t, b, k, fanout.Position{Epoch: want[c][0].Epoch})
		if !r.Recovered {
			t.Fatalf("channel %d not recovered after %d compactions", c, compactions)
		}
		samePublications(t, k.String(), r.Publications, want[c])
	}
	files, _, err := fanout.LogFiles(dir)
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

// lastSegment is the path of dir's newest segment.
func lastSegment(t *testing.T, dir string) string {
	t.Helper()
	files, seg, err := fanout.LogFiles(dir)
	if err != nil || seg == "" {
		t.Fatalf("no segment in %v: %v", files, err)
	}
	return seg
}

// lastRecordStart is the offset of the last record in a segment.
func lastRecordStart(t *testing.T, seg []byte) int {
	t.Helper()
	last := fanout.LastRecordStart(seg)
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
	if fanout.BootID() == "" {
		t.Fatal("no boot id on this machine")
	}
	dir := t.TempDir()
	a := openLogged(t, dir, fanout.MemoryConfig{})
	k1, k2 := acme("a"), acme("b")
	p1 := fanouttest.MustPublish(t, a, fanouttest.Msg(k1, "m1"))
	p2 := fanouttest.MustPublish(t, a, fanouttest.Msg(k2, "m2"))
	p3 := fanouttest.MustPublish(t, a, fanouttest.Msg(k2, "m3"))
	killed := copyDir(t, dir) // the files as a SIGKILL now leaves them

	cut := copyDir(t, dir) // killed while appending m3: its length not yet written
	editSegment(t, cut, func(b []byte) []byte {
		at := lastRecordStart(t, b)
		clear(b[at : at+4])
		return b
	})
	rebooted := copyDir(t, dir)
	editSegment(t, rebooted, fanout.OtherBoot)
	damaged := copyDir(t, dir) // a bit flipped inside the last record
	editSegment(t, damaged, func(b []byte) []byte {
		b[lastRecordStart(t, b)+12] ^= 0x40
		return b
	})

	lost := copyDir(t, dir) // the newest segment did not survive
	if err := os.Remove(lastSegment(t, lost)); err != nil {
		t.Fatal(err)
	}

	a.FailHistoryLog(errors.New("disk gone"))
	fanouttest.MustPublish(t, a, fanouttest.Msg(k1, "unlogged"))
	a.Stop()
	failed := dir

	b := openLogged(t, killed, fanout.MemoryConfig{})
	samePublications(t, "k1 after kill", fanouttest.MustRecover(t, b, k1, fanout.Position{Epoch: p1.Epoch}).Publications, []fanout.Publication{p1})
	samePublications(t, "k2 after kill", fanouttest.MustRecover(t, b, k2, fanout.Position{Epoch: p2.Epoch}).Publications, []fanout.Publication{p2, p3})
	b.Stop()
	// The start after the kill wrote a whole log again.
	c := openLogged(t, killed, fanout.MemoryConfig{})
	samePublications(t, "k2 after kill and restart", fanouttest.MustRecover(t, c, k2, p2.Position).Publications, []fanout.Publication{p3})

	d := openLogged(t, cut, fanout.MemoryConfig{})
	r := fanouttest.MustRecover(t, d, k2, p2.Position)
	if !r.Recovered || r.Top != p2.Position || len(r.Publications) != 0 {
		t.Fatalf("killed while appending: %+v, want recovered at %v", r, p2.Position)
	}
	if p := fanouttest.MustPublish(t, d, fanouttest.Msg(k2, "m3 again")); p.Position != p3.Position {
		t.Fatalf("the cut record's offset: %v, want %v given again", p.Position, p3.Position)
	}

	for name, dir := range map[string]string{"rebooted": rebooted, "damaged": damaged, "lost": lost, "failed": failed} {
		e := openLogged(t, dir, fanout.MemoryConfig{})
		for _, p := range []fanout.Publication{p1, p2} {
			r := fanouttest.MustRecover(t, e, p.Key, fanout.Position{Epoch: p.Epoch})
			if r.Recovered || r.Top.Epoch == p.Epoch || r.Top.Offset != 0 {
				t.Fatalf("%s: %v: %+v, want not recovered, new epoch", name, p.Key, r)
			}
		}
		if p := fanouttest.MustPublish(t, e, fanouttest.Msg(k1, "again")); p.Offset != 1 || p.Epoch == p1.Epoch {
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
	cfg := fanout.MemoryConfig{}.WithSegmentSize(4096)
	a := openLogged(t, dir, cfg)
	k := acme("big")
	small := fanouttest.MustPublish(t, a, fanouttest.Msg(k, "small"))
	m := fanouttest.Msg(k, "big")
	m.Data = []byte(`"` + strings.Repeat("x", 10000) + `"`)
	big := fanouttest.MustPublish(t, a, m)
	a.Stop()
	editSegment(t, dir, fanout.OtherBoot)
	b := openLogged(t, dir, cfg)
	samePublications(t, "after reboot", fanouttest.MustRecover(t, b, k, fanout.Position{Epoch: small.Epoch}).Publications, []fanout.Publication{small, big})
}

// TestMemoryHistoryTTLAcrossRestart: a stream reset by its TTL is logged,
// and a channel idle past the TTL while the node was down is not loaded.
func TestMemoryHistoryTTLAcrossRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clock := &fakeClock{}
	clock.ns.Store(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	cfg := fanout.MemoryConfig{HistoryTTL: time.Hour, HistoryDir: dir}.WithSegmentSize(64 << 10)
	open := func() *fanout.MemoryBroker {
		b, err := fanout.NewMemoryBrokerClock(cfg, clock.now)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Stop)
		return b
	}
	ka, kb := acme("a"), acme("b")
	a := open()
	old := fanouttest.MustPublish(t, a, fanouttest.Msg(ka, "old"))
	clock.advance(2 * time.Hour)
	fresh := fanouttest.MustPublish(t, a, fanouttest.Msg(ka, "fresh")) // reset: new epoch, offset 1
	stale := fanouttest.MustPublish(t, a, fanouttest.Msg(kb, "stale"))
	if fresh.Epoch == old.Epoch || fresh.Offset != 1 {
		t.Fatalf("publication after the TTL at %v", fresh.Position)
	}
	a.Stop()

	b := open()
	r := fanouttest.MustRecover(t, b, ka, fanout.Position{Epoch: fresh.Epoch})
	if !r.Recovered || len(r.Publications) != 1 || r.Publications[0].ID != "fresh" {
		t.Fatalf("reset channel after restart: %+v", r)
	}
	b.Stop()

	clock.advance(61 * time.Minute)
	c := open()
	if n := c.Channels(); n != 0 {
		t.Fatalf("%d channels loaded after the TTL passed while down, want 0", n)
	}
	if r := fanouttest.MustRecover(t, c, kb, stale.Position); r.Recovered {
		t.Fatal("channel idle past its TTL recovered")
	}
}

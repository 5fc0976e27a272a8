package gateway

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
)

// cursorStep is one event of an SSE stream as far as resuming goes: its
// name ("" for a publication) and the offset its cursor holds for the
// stream's one channel.
type cursorStep struct {
	name   string
	offset uint64
}

func (s cursorStep) String() string { return fmt.Sprintf("%s@%d", s.name, s.offset) }

// docSSEExample returns the events with an id of docs/protocol.md's
// example stream (the first code block after "### The stream").
func docSSEExample(t *testing.T) []cursorStep {
	t.Helper()
	doc, err := os.ReadFile(protocolDoc)
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i := strings.Index(s, "### The stream")
	if i < 0 {
		t.Fatal(`docs/protocol.md has no "### The stream" section`)
	}
	s = s[i:]
	start := strings.Index(s, "```\n")
	end := strings.Index(s[start+4:], "```")
	if start < 0 || end < 0 {
		t.Fatal("no example stream under The stream")
	}
	var steps []cursorStep
	for block := range strings.SplitSeq(s[start+4:start+4+end], "\n\n") {
		var name, id string
		for line := range strings.SplitSeq(block, "\n") {
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				name = v
			}
			if v, ok := strings.CutPrefix(line, "id: "); ok {
				id = v
			}
		}
		if id == "" {
			continue
		}
		c, err := parseCursor(id)
		if err != nil || len(c) != 1 {
			t.Fatalf("example id %q: %v, %d entries", id, err, len(c))
		}
		steps = append(steps, cursorStep{name, c[0].pos.Offset})
	}
	return steps
}

// TestProtocolDocSSECursors: the cursors of docs/protocol.md's example
// stream, which resumes orders/42 from offset 15 with 17 published, are
// those the server writes in the same case: the subscribed event holds the
// resume position, each publication its own offset.
func TestProtocolDocSSECursors(t *testing.T) {
	t.Parallel()
	want := docSSEExample(t)

	e := newEnv(t, envOptions{})
	var at15 fanout.Position
	for range 17 {
		p := e.publish("acme", "orders/42", `1`)
		if p.Offset == 15 {
			at15 = fanout.Position{Offset: p.Offset, Epoch: p.Epoch}
		}
	}
	pos := newPositions("acme", 1)
	pos.add("orders/42", at15)
	var enc cursorEncoder
	s := e.open(request{bearer: e.token("acme", "u1", "orders/*"), query: q("channel", "orders/42"),
		lastID: string(enc.encode(pos.entries))})
	s.next(t, 5*time.Second) // retry
	var got []cursorStep
	for len(got) < len(want) {
		if len(got) == 3 {
			e.publish("acme", "orders/42", `1`) // offset 18, live
		}
		ev := s.nextEvent(t)
		c, err := parseCursor(ev.ID)
		if !ev.HasID || err != nil || len(c) != 1 {
			t.Fatalf("event %+v: cursor %v", ev, err)
		}
		got = append(got, cursorStep{ev.Name, c[0].pos.Offset})
	}
	if !slices.Equal(got, want) {
		t.Fatalf("docs/protocol.md's example stream has the cursors %v; the server writes %v", want, got)
	}
}

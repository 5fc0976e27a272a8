package sse

import (
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/gateway/internal/session"
)

func TestCursorRoundTrip(t *testing.T) {
	k1 := fanout.Key{Tenant: "acme", Channel: "orders/1"}
	k2 := fanout.Key{Tenant: "acme", Channel: "orders/2"}
	k3 := fanout.Key{Tenant: "acme", Channel: "users/u1/inbox"}
	entries := []session.CursorEntry{
		{Hash: session.ChannelHash(k1), Pos: fanout.Position{Offset: 42, Epoch: "e1"}},
		{Hash: session.ChannelHash(k2), Pos: fanout.Position{Offset: 0, Epoch: "e1"}},
		{Hash: session.ChannelHash(k3), Pos: fanout.Position{Offset: 1 << 40, Epoch: "another-epoch"}},
	}
	var enc CursorEncoder
	text := string(enc.Encode(entries))
	if len(text) > 60 {
		t.Errorf("cursor for 3 channels is %d characters: %s", len(text), text)
	}
	c, err := ParseCursor(text)
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range []fanout.Key{k1, k2, k3} {
		if pos, ok := c.Lookup(k); !ok || pos != entries[i].Pos {
			t.Errorf("lookup %v = %v %v, want %v", k, pos, ok, entries[i].Pos)
		}
	}
	if _, ok := c.Lookup(fanout.Key{Tenant: "globex", Channel: "orders/1"}); ok {
		t.Errorf("another tenant's channel maps to an entry")
	}
	// Re-encoding into the same buffers gives the same text.
	if again := string(enc.Encode(entries)); again != text {
		t.Errorf("re-encoding differs: %s vs %s", again, text)
	}
}

// Two channels of tenant acme whose names share the cursor's hash.
var collidingA, collidingB = fanout.Key{Tenant: "acme", Channel: "rooms/c987999"}, fanout.Key{Tenant: "acme", Channel: "rooms/c1132190"}

// TestCursorCollidingChannels: the cursor of a stream whose channels share
// a hash parses, and covers neither of them, whichever other channels the
// stream resumes with; the others resume.
func TestCursorCollidingChannels(t *testing.T) {
	if session.ChannelHash(collidingA) != session.ChannelHash(collidingB) {
		t.Fatalf("%v and %v do not collide", collidingA, collidingB)
	}
	other := fanout.Key{Tenant: "acme", Channel: "rooms/lobby"}
	var enc CursorEncoder
	both := string(enc.Encode([]session.CursorEntry{
		{Hash: session.ChannelHash(collidingA), Pos: fanout.Position{Offset: 3, Epoch: "ea"}},
		{Hash: session.ChannelHash(other), Pos: fanout.Position{Offset: 9, Epoch: "eo"}},
		{Hash: session.ChannelHash(collidingB), Pos: fanout.Position{Offset: 5, Epoch: "eb"}},
	}))
	onlyA := string(enc.Encode([]session.CursorEntry{
		{Hash: session.ChannelHash(collidingA), Pos: fanout.Position{Offset: 3, Epoch: "ea"}},
		{Hash: session.ChannelHash(other), Pos: fanout.Position{Offset: 9, Epoch: "eo"}},
	}))
	show := func(ps []*fanout.Position) []string {
		var out []string
		for _, p := range ps {
			if p == nil {
				out = append(out, "live")
			} else {
				out = append(out, p.Epoch)
			}
		}
		return out
	}
	for _, c := range []struct {
		name, cursor string
		channels     []string
		want         []string
	}{
		{"both in the cursor, both asked", both, []string{collidingA.Channel, other.Channel, collidingB.Channel}, []string{"live", "eo", "live"}},
		{"both in the cursor, one asked", both, []string{collidingA.Channel, other.Channel}, []string{"live", "eo"}},
		{"one in the cursor, both asked", onlyA, []string{other.Channel, collidingB.Channel, collidingA.Channel}, []string{"eo", "live", "live"}},
		{"one in the cursor, it asked", onlyA, []string{collidingA.Channel, other.Channel}, []string{"ea", "eo"}},
	} {
		cur, err := ParseCursor(c.cursor)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := show(cur.Resume("acme", c.channels)); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v resume %v, want %v", c.name, c.channels, got, c.want)
		}
	}
	cur, _ := ParseCursor(both)
	if _, ok := cur.Lookup(collidingA); ok {
		t.Errorf("a hash two entries share looked up")
	}
	if got := show(Cursor(nil).Resume("acme", []string{other.Channel})); !slices.Equal(got, []string{"live"}) {
		t.Errorf("no cursor resumes %v", got)
	}
}

func TestParseCursorErrors(t *testing.T) {
	b64 := func(b ...byte) string { return base64.RawURLEncoding.EncodeToString(b) }
	cases := map[string]struct {
		in   string
		want string
	}{
		"empty":         {"", "empty"},
		"not base64":    {"a+b/", "base64url"},
		"padded":        {"AQ==", "base64url"},
		"long":          {strings.Repeat("A", maxCursorLen+1), "longer than"},
		"version":       {b64(2, 0, 0), "unknown version 2"},
		"truncated":     {b64(1), "truncated"},
		"epoch count":   {b64(1, 0xff, 0xff, 0x03), "epoch count"},
		"epoch length":  {b64(1, 1, 0xff, 0x03), "epoch length"},
		"epoch short":   {b64(1, 1, 5, 'a'), "truncated"},
		"epoch index":   {b64(1, 1, 1, 'e', 1, 0, 0, 0, 1, 3, 7), "names epoch 3"},
		"trailing":      {b64(1, 0, 0, 9), "trailing"},
		"overlong int":  {b64(1, 0, 1, 0, 0, 0, 1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01), "overlong"},
		"entries count": {b64(1, 0, 0xff, 0xff, 0x7f), "entry count"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseCursor(c.in)
			if !errors.Is(err, ErrBadCursor) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("parseCursor(%q) = %v, want ErrBadCursor mentioning %q", c.in, err, c.want)
			}
		})
	}
}

func FuzzParseCursor(f *testing.F) {
	var enc CursorEncoder
	f.Add(string(enc.Encode(nil)))
	f.Add(string(enc.Encode([]session.CursorEntry{{Hash: 1, Pos: fanout.Position{Offset: 1, Epoch: "e"}}})))
	f.Add(string(enc.Encode([]session.CursorEntry{
		{Hash: 1, Pos: fanout.Position{Offset: 10, Epoch: "e1"}},
		{Hash: 2, Pos: fanout.Position{Offset: 0, Epoch: ""}},
		{Hash: 3, Pos: fanout.Position{Offset: ^uint64(0), Epoch: "e1"}},
	})))
	f.Add("")
	f.Add("AQ")
	f.Add("!!!")
	f.Add("AQEBZQIAAAABAAcAAAABAAg")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCursor(s)
		if err != nil {
			if !errors.Is(err, ErrBadCursor) {
				t.Fatalf("error %v does not wrap ErrBadCursor", err)
			}
			return
		}
		// A cursor that parses re-encodes to one that parses to the same
		// entries.
		var enc CursorEncoder
		again, err := ParseCursor(string(enc.Encode(c)))
		if err != nil {
			t.Fatalf("re-encoded cursor does not parse: %v", err)
		}
		if len(again) != len(c) {
			t.Fatalf("re-encoded cursor has %d entries, want %d", len(again), len(c))
		}
		for i := range c {
			if again[i] != c[i] {
				t.Fatalf("entry %d: %+v, want %+v", i, again[i], c[i])
			}
		}
	})
}

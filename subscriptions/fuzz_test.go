package subscriptions

import (
	"strings"
	"testing"

	"github.com/heraldgw/herald/internal/names"
)

// FuzzValidateChannel checks ValidateChannel against the reference rules
// and that it never panics.
func FuzzValidateChannel(f *testing.F) {
	for _, s := range []string{
		"orders/1", "a", "", "/", "a/", "/a", "a//b", "users/alice@example.com/inbox", "a b", "ü",
		strings.Repeat("x", 64), strings.Repeat("x", 65), strings.Repeat("a/", 127) + "a", strings.Repeat("a/", 128) + "a",
		"\x00", "a/\xff", "*", "**", "{sub}", ".", "..", "...", "a/../b", "a/./b", "a/.../b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ch string) {
		err := names.ValidateChannel(ch)
		if ref := refValidChannel(ch); (err == nil) != ref {
			t.Fatalf("ValidateChannel(%q) = %v, reference valid=%v", ch, err, ref)
		}
		if err := names.ValidateTenant(ch); (err == nil) != refSegment(ch) {
			t.Fatalf("ValidateTenant(%q) = %v, reference disagrees", ch, err)
		}
	})
}

// FuzzGrantMatch checks CompileGrant and Match against the reference: they
// never panic, compile exactly the valid patterns, match exactly what the
// reference matches, and never match an invalid channel.
func FuzzGrantMatch(f *testing.F) {
	seeds := [][3]string{
		{"orders/*", "alice", "orders/1"},
		{"users/{sub}/**", "alice", "users/alice/inbox/1"},
		{"users/{sub}/**", "a/b", "users/a/b/x"},
		{"**", "x", "a//b"},
		{"**", "x", "a/"},
		{"*", "x", ""},
		{"a/**/b", "x", "a/c/b"},
		{"*/*", "x", "a/b/"},
		{"{sub}", "", ""},
		{"a", "x", "a/"},
		{"**", "x", strings.Repeat("a/", 128) + "a"},
		{"*", "x", strings.Repeat("y", 65)},
		{"a/*", "x", "a/.."},
		{"a/**", "x", "a/b/."},
		{"{sub}/x", "..", "../x"},
		{"a/..", "x", "a/.."},
		{"a/...", "...", "a/..."},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, pattern, subject, channel string) {
		g, err := CompileGrant(pattern, subject)
		refSegs, refOK := refPattern(pattern, subject)
		if (err == nil) != refOK {
			t.Fatalf("CompileGrant(%q, %q) = %v, reference ok=%v", pattern, subject, err, refOK)
		}
		if err != nil {
			return
		}
		got := g.Match(channel)
		if got && names.ValidateChannel(channel) != nil {
			t.Fatalf("grant %q matched invalid channel %q", pattern, channel)
		}
		want := refValidChannel(channel) && refMatch(refSegs, strings.Split(channel, "/"))
		if got != want {
			t.Fatalf("grant %q (sub %q) on %q: Match=%v, reference %v", pattern, subject, channel, got, want)
		}
		if Grants([]Grant{g}).Allows(channel) != got {
			t.Fatalf("Grants.Allows disagrees with Match")
		}
	})
}

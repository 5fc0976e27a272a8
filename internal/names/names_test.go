package names

import (
	"errors"
	"strings"
	"testing"
)

func TestDotSegmentsAreInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{".", false},
		{"..", false},
		{"...", true},
		{"....", true},
		{".a", true},
		{"a.", true},
		{"a..b", true},
		{"x.y", true},
	} {
		if got := SegmentOK(tc.name); got != tc.ok {
			t.Errorf("SegmentOK(%q) = %v, want %v", tc.name, got, tc.ok)
		}
		if err := ValidSegment(tc.name); (err == nil) != tc.ok {
			t.Errorf("ValidSegment(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err := ValidateTenant(tc.name); (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalidName)) {
			t.Errorf("ValidateTenant(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	for _, ch := range []string{".", "..", "a/.", "a/..", "./a", "../a", "a/./b", "a/../b", "orders/" + strings.Repeat("x/", 10) + ".."} {
		err := ValidateChannel(ch)
		if err == nil || !errors.Is(err, ErrInvalidName) {
			t.Errorf("ValidateChannel(%q) = %v, want an ErrInvalidName", ch, err)
		} else if !strings.Contains(err.Error(), "dot-segment") {
			t.Errorf("ValidateChannel(%q) = %q, want the error to name the dot-segment", ch, err)
		}
	}
	for _, ch := range []string{"...", "a/.../b", "a/.b/c.", "v1.2/x..y"} {
		if err := ValidateChannel(ch); err != nil {
			t.Errorf("ValidateChannel(%q) = %v, want valid", ch, err)
		}
	}
}

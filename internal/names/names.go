// Package names validates tenant and channel names (docs/protocol.md). It is a leaf:
// the producer package outboxfeed/stage and the gateway's subscriptions
// both check names with it, so staging a notification links none of the
// gateway's dependencies.
package names

import (
	"errors"
	"fmt"
	"strings"
)

// Limits on names (docs/protocol.md, "Tokens, tenants and channels").
const (
	MaxChannelLen = 255
	MaxSegmentLen = 64
)

// ErrInvalidName is wrapped by every channel- or tenant-name error
// (subscriptions.ErrInvalidName is this value).
var ErrInvalidName = errors.New("invalid name")

func segmentByteOK(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	case c == '_', c == '.', c == ':', c == '@', c == '-':
		return true
	}
	return false
}

// dotSegment reports whether s is "." or "..", the dot-segments that path
// and URL normalisation (RFC 3986 §5.2.4) remove or resolve; a name that
// contains one could change meaning when it is used in a path. "..." and
// longer runs of dots are ordinary segments.
func dotSegment(s string) bool { return s == "." || s == ".." }

// SegmentOK is ValidSegment without the error, for the matching path.
func SegmentOK(s string) bool {
	if len(s) == 0 || len(s) > MaxSegmentLen || dotSegment(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !segmentByteOK(s[i]) {
			return false
		}
	}
	return true
}

// ValidSegment checks one "/"-separated segment of a name: 1 to
// MaxSegmentLen bytes of [A-Za-z0-9_.:@-], and not "." or "..".
func ValidSegment(s string) error {
	if len(s) == 0 {
		return fmt.Errorf("empty segment")
	}
	if len(s) > MaxSegmentLen {
		return fmt.Errorf("segment longer than %d bytes", MaxSegmentLen)
	}
	if dotSegment(s) {
		return fmt.Errorf("segment %q is a dot-segment (\".\" and \"..\" are not names)", s)
	}
	for i := 0; i < len(s); i++ {
		if !segmentByteOK(s[i]) {
			return fmt.Errorf("segment %q: byte %q at %d is not one of [A-Za-z0-9_.:@-]", Trunc(s), s[i], i)
		}
	}
	return nil
}

// ValidateTenant reports whether t is a valid tenant id (one segment).
func ValidateTenant(t string) error {
	if err := ValidSegment(t); err != nil {
		return fmt.Errorf("%w: tenant: %v", ErrInvalidName, err)
	}
	return nil
}

// ValidateChannel reports whether name is a valid channel name.
func ValidateChannel(name string) error {
	if name == "" {
		return fmt.Errorf("%w: channel is empty", ErrInvalidName)
	}
	if len(name) > MaxChannelLen {
		return fmt.Errorf("%w: channel longer than %d bytes", ErrInvalidName, MaxChannelLen)
	}
	for seg := range strings.SplitSeq(name, "/") {
		if err := ValidSegment(seg); err != nil {
			return fmt.Errorf("%w: channel %q: %v", ErrInvalidName, Trunc(name), err)
		}
	}
	return nil
}

// Trunc keeps error messages short when a hostile client sends a huge name.
func Trunc(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

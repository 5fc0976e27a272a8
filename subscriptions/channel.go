package subscriptions

import (
	"fmt"
	"strings"
)

// Limits on names, from SPEC §4.
const (
	MaxChannelLen = 255
	MaxSegmentLen = 64
)

func segmentByteOK(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	case c == '_', c == '.', c == ':', c == '@', c == '-':
		return true
	}
	return false
}

// segmentOK is validSegment without the error, for the matching path.
func segmentOK(s string) bool {
	if len(s) == 0 || len(s) > MaxSegmentLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !segmentByteOK(s[i]) {
			return false
		}
	}
	return true
}

func validSegment(s string) error {
	if len(s) == 0 {
		return fmt.Errorf("empty segment")
	}
	if len(s) > MaxSegmentLen {
		return fmt.Errorf("segment longer than %d bytes", MaxSegmentLen)
	}
	for i := 0; i < len(s); i++ {
		if !segmentByteOK(s[i]) {
			return fmt.Errorf("segment %q: byte %q at %d is not one of [A-Za-z0-9_.:@-]", trunc(s), s[i], i)
		}
	}
	return nil
}

// ValidateTenant reports whether t is a valid tenant id (one segment).
func ValidateTenant(t string) error {
	if err := validSegment(t); err != nil {
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
		if err := validSegment(seg); err != nil {
			return fmt.Errorf("%w: channel %q: %v", ErrInvalidName, trunc(name), err)
		}
	}
	return nil
}

// trunc keeps error messages short when a hostile client sends a huge name.
func trunc(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

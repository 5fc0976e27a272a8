package subscriptions

import "github.com/heraldgw/herald/internal/names"

// Limits on names (docs/protocol.md, "Tokens, tenants and channels").
const (
	MaxChannelLen = names.MaxChannelLen
	MaxSegmentLen = names.MaxSegmentLen
)

// The rules live in internal/names, a leaf the producer package
// outboxfeed/stage shares without linking this package's dependencies.

func segmentOK(s string) bool     { return names.SegmentOK(s) }
func validSegment(s string) error { return names.ValidSegment(s) }
func trunc(s string) string       { return names.Trunc(s) }

// ValidateTenant reports whether t is a valid tenant id (one segment).
func ValidateTenant(t string) error { return names.ValidateTenant(t) }

// ValidateChannel reports whether name is a valid channel name.
func ValidateChannel(name string) error { return names.ValidateChannel(name) }

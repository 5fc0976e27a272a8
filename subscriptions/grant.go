package subscriptions

import (
	"fmt"
	"strings"

	"github.com/heraldgw/herald/internal/names"
)

// Grant is one compiled channel pattern.
type Grant struct {
	segs []string // literal segment, "*" or "**"; {sub} already expanded
}

// CompileGrant parses pattern and expands {sub} to subject. The subject must
// itself be a valid segment for a pattern using {sub} to compile.
func CompileGrant(pattern, subject string) (Grant, error) {
	if pattern == "" {
		return Grant{}, fmt.Errorf("%w: empty pattern", ErrInvalidGrant)
	}
	if len(pattern) > names.MaxChannelLen {
		return Grant{}, fmt.Errorf("%w: pattern longer than %d bytes", ErrInvalidGrant, names.MaxChannelLen)
	}
	parts := strings.Split(pattern, "/")
	g := Grant{segs: make([]string, 0, len(parts))}
	for i, p := range parts {
		switch p {
		case "**":
			if i != len(parts)-1 {
				return Grant{}, fmt.Errorf("%w: %q: ** may only be the last segment", ErrInvalidGrant, names.Trunc(pattern))
			}
		case "*":
		case "{sub}":
			if err := names.ValidSegment(subject); err != nil {
				return Grant{}, fmt.Errorf("%w: %q: subject cannot stand as a segment: %v", ErrInvalidGrant, names.Trunc(pattern), err)
			}
			p = subject
		default:
			if err := names.ValidSegment(p); err != nil {
				return Grant{}, fmt.Errorf("%w: %q: %v", ErrInvalidGrant, names.Trunc(pattern), err)
			}
		}
		g.segs = append(g.segs, p)
	}
	return g, nil
}

// Match reports whether channel matches the grant. A channel that is not
// a valid name (see ValidateChannel) never matches, whatever the pattern.
func (g Grant) Match(channel string) bool {
	if len(channel) == 0 || len(channel) > names.MaxChannelLen {
		return false
	}
	i := 0
	for _, want := range g.segs {
		if i > len(channel) {
			return false // channel has fewer segments than the pattern
		}
		if want == "**" {
			return i < len(channel) && validSegments(channel[i:])
		}
		end := strings.IndexByte(channel[i:], '/')
		var seg string
		if end < 0 {
			seg, end = channel[i:], len(channel)
		} else {
			seg, end = channel[i:i+end], i+end
		}
		if want == "*" {
			if !names.SegmentOK(seg) {
				return false
			}
		} else if want != seg { // want is a valid literal, so seg is too
			return false
		}
		i = end + 1
	}
	return i == len(channel)+1
}

// validSegments reports whether s is one or more valid "/"-separated
// segments.
func validSegments(s string) bool {
	for {
		end := strings.IndexByte(s, '/')
		if end < 0 {
			return names.SegmentOK(s)
		}
		if !names.SegmentOK(s[:end]) {
			return false
		}
		s = s[end+1:]
	}
}

// Grants is a compiled set of patterns; the zero value allows nothing.
type Grants []Grant

// CompileGrants compiles every pattern, failing on the first bad one.
func CompileGrants(patterns []string, subject string) (Grants, error) {
	gs := make(Grants, 0, len(patterns))
	for _, p := range patterns {
		g, err := CompileGrant(p, subject)
		if err != nil {
			return nil, err
		}
		gs = append(gs, g)
	}
	return gs, nil
}

// Allows reports whether any grant matches channel.
func (gs Grants) Allows(channel string) bool {
	for _, g := range gs {
		if g.Match(channel) {
			return true
		}
	}
	return false
}

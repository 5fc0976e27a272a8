package outboxfeed

import (
	"errors"
	"fmt"
	"strings"

	"github.com/heraldgw/herald/internal/names"
	"github.com/heraldgw/herald/outboxfeed/internal/rules"
)

// ErrInvalidRoute wraps every error of CompileRoutes.
var ErrInvalidRoute = errors.New("outboxfeed: invalid route")

// Route selects records for a handler (docs/handlers.md, "Routes"). Each
// key that is set must match; an empty Route matches every record.
type Route struct {
	// Kind is one of the record kinds (Kinds), or empty for any.
	Kind string `json:"kind,omitempty"`
	// Type is a glob over the type's dot-separated parts: "*" matches one
	// part, a last "**" one or more, e.g. "invoice.*" or "billing.**".
	Type string `json:"type,omitempty"`
	// Tenant is a tenant id, or empty for any.
	Tenant string `json:"tenant,omitempty"`
	// Channel is a channel pattern in the grant syntax ("*" one segment, a
	// last "**" one or more), e.g. "billing/**".
	Channel string `json:"channel,omitempty"`
}

// Kinds are the record kinds a producer may stage.
var Kinds = []string{"notification", "integration_event", "journey_step_command", "provider_side_effect"}

// ValidKind reports whether k is one of Kinds.
func ValidKind(k string) bool {
	for _, v := range Kinds {
		if v == k {
			return true
		}
	}
	return false
}

// Routes is a compiled list of routes: a record is routed when any of them
// matches, and every record when the list is empty.
type Routes struct {
	list []compiledRoute
}

type compiledRoute struct {
	src     Route
	typ     []string // nil: any type
	channel []string // nil: any channel; else segments, "*" or a last "**"
}

// CompileRoutes checks and compiles rs. Errors name the route by index.
func CompileRoutes(rs []Route) (Routes, error) {
	out := Routes{list: make([]compiledRoute, 0, len(rs))}
	for i, r := range rs {
		c := compiledRoute{src: r}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: routes[%d]: "+format, append([]any{ErrInvalidRoute, i}, args...)...)
		}
		if r.Kind != "" && !ValidKind(r.Kind) {
			return Routes{}, bad("kind %q: must be one of %s", r.Kind, strings.Join(Kinds, ", "))
		}
		if r.Tenant != "" && strings.ContainsAny(r.Tenant, "*/") {
			return Routes{}, bad("tenant %q: a tenant id, not a pattern", r.Tenant)
		}
		if r.Type != "" {
			parts, err := compileTypeGlob(r.Type)
			if err != nil {
				return Routes{}, bad("type %q: %v", r.Type, err)
			}
			c.typ = parts
		}
		if r.Channel != "" {
			if strings.Contains(r.Channel, "{sub}") {
				return Routes{}, bad("channel %q: {sub} has no meaning in a route", r.Channel)
			}
			segs, err := compileChannelPattern(r.Channel)
			if err != nil {
				return Routes{}, bad("channel %q: %v", r.Channel, err)
			}
			c.channel = segs
		}
		out.list = append(out.list, c)
	}
	return out, nil
}

// compileTypeGlob splits a type glob into its parts.
func compileTypeGlob(glob string) ([]string, error) {
	parts := strings.Split(glob, ".")
	for i, p := range parts {
		switch {
		case p == "**":
			if i != len(parts)-1 {
				return nil, errors.New("** may only be the last part")
			}
		case p == "*":
		case p == "":
			return nil, errors.New("empty part")
		default:
			if err := rules.ValidateType(p); err != nil {
				return nil, errors.New("a part must be * or of [a-z0-9_-]")
			}
			if strings.Contains(p, "*") {
				return nil, errors.New("* must be a whole part")
			}
		}
	}
	return parts, nil
}

// compileChannelPattern splits a channel pattern (the grant syntax of
// docs/protocol.md: "*" one segment, a last "**" one or more).
func compileChannelPattern(p string) ([]string, error) {
	if len(p) > names.MaxChannelLen {
		return nil, fmt.Errorf("longer than %d bytes", names.MaxChannelLen)
	}
	segs := strings.Split(p, "/")
	for i, seg := range segs {
		switch seg {
		case "**":
			if i != len(segs)-1 {
				return nil, errors.New("** may only be the last segment")
			}
		case "*":
		default:
			if err := names.ValidSegment(seg); err != nil {
				return nil, err
			}
		}
	}
	return segs, nil
}

// matchSegments reports whether s, split at sep, matches the pattern
// parts: a literal, "*" (any one part) or a last "**" (one or more).
func matchSegments(parts []string, s, sep string) bool {
	for i, want := range parts {
		if want == "**" {
			return s != ""
		}
		seg, rest, more := strings.Cut(s, sep)
		if seg == "" || (want != "*" && want != seg) {
			return false
		}
		if i == len(parts)-1 {
			return !more
		}
		if !more {
			return false
		}
		s = rest
	}
	return false
}

// Match reports whether r is routed by rs.
func (rs Routes) Match(r *Record) bool {
	if len(rs.list) == 0 {
		return true
	}
	for i := range rs.list {
		if rs.list[i].match(r) {
			return true
		}
	}
	return false
}

func (c *compiledRoute) match(r *Record) bool {
	kind := r.Kind
	if kind == "" {
		kind = "notification"
	}
	switch {
	case c.src.Kind != "" && c.src.Kind != kind:
		return false
	case c.src.Tenant != "" && c.src.Tenant != r.TenantID:
		return false
	case c.typ != nil && !matchSegments(c.typ, r.Type, "."):
		return false
	case c.channel != nil && !matchSegments(c.channel, r.Channel, "/"):
		return false
	}
	return true
}

// All reports whether rs routes every record (no routes).
func (rs Routes) All() bool { return len(rs.list) == 0 }

// List returns the routes rs was compiled from.
func (rs Routes) List() []Route {
	out := make([]Route, len(rs.list))
	for i := range rs.list {
		out[i] = rs.list[i].src
	}
	return out
}

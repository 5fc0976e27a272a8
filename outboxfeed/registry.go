package outboxfeed

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"

	"github.com/heraldgw/herald/outboxfeed/internal/rules"
)

// Registry lists the (type, schema_version) pairs this deployment can read,
// loaded from a JSON file (docs/delivery.md, "Types, versions and readers"):
//
//	{"order.updated": {"versions": [1, 2]}}
//
// Extra members next to "versions" (such as per-version payload schemas)
// are ignored. A nil *Registry accepts every type at any version ≥ 1.
type Registry struct {
	readers map[string][]int // sorted versions per type
}

// LoadRegistry reads and parses a registry file.
func LoadRegistry(path string) (*Registry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidRegistry, err)
	}
	r, err := ParseRegistry(b)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return r, nil
}

// ParseRegistry parses registry JSON.
func ParseRegistry(data []byte) (*Registry, error) {
	var raw map[string]struct {
		Versions *[]int `json:"versions"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidRegistry, err)
	}
	if raw == nil {
		return nil, fmt.Errorf("%w: want a JSON object of types", ErrInvalidRegistry)
	}
	r := &Registry{readers: make(map[string][]int, len(raw))}
	for typ, entry := range raw {
		if err := rules.ValidateType(typ); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidRegistry, err)
		}
		if entry.Versions == nil || len(*entry.Versions) == 0 {
			return nil, fmt.Errorf("%w: type %q: \"versions\" must list at least one schema version", ErrInvalidRegistry, typ)
		}
		vs := slices.Clone(*entry.Versions)
		for _, v := range vs {
			if v < 1 {
				return nil, fmt.Errorf("%w: type %q: version %d: must be ≥ 1", ErrInvalidRegistry, typ, v)
			}
		}
		sort.Ints(vs)
		r.readers[typ] = slices.Compact(vs)
	}
	return r, nil
}

// Reader returns nil when a record of typ at version can be read, and
// otherwise the dead-letter reason "no reader for <type> v<n>".
func (r *Registry) Reader(typ string, version int) error {
	if version < 1 {
		return fmt.Errorf("no reader for %s v%d", typ, version)
	}
	if r == nil {
		return nil
	}
	if _, ok := slices.BinarySearch(r.readers[typ], version); ok {
		return nil
	}
	return fmt.Errorf("no reader for %s v%d", typ, version)
}

// Types returns a copy of the registered versions per type.
func (r *Registry) Types() map[string][]int {
	out := map[string][]int{}
	if r == nil {
		return out
	}
	for t, vs := range r.readers {
		out[t] = slices.Clone(vs)
	}
	return out
}

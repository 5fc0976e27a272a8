package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"go.yaml.in/yaml/v3"
)

// yamlConfigEntries reads a YAML config file: one document holding a
// mapping whose keys are strings, or nothing (only comments). Each value
// becomes the JSON it stands for, so that applyEntries and setFromJSON
// treat both formats alike. YAML without a JSON equivalent is refused:
// keys that are not strings, repeated keys, anchors and aliases, merge keys,
// tags outside the core schema, .inf and .nan.
func yamlConfigEntries(path string, b []byte) ([]configEntry, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil // empty, or only comments
		}
		return nil, fmt.Errorf("config: %s: not valid YAML: %s", path, yamlMessage(err))
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		return nil, fmt.Errorf("config: %s:%d: a second YAML document; a config file is one mapping", path, next.Line)
	case !errors.Is(err, io.EOF):
		return nil, fmt.Errorf("config: %s: not valid YAML: %s", path, yamlMessage(err))
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if err := yamlPlain(root); err != nil {
		return nil, fmt.Errorf("config: %s:%d: %v", path, root.Line, err)
	}
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		return nil, nil // "~" or "null", as JSON null is an empty config
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("config: %s:%d: not a YAML mapping (want keys that are flag names, e.g. \"listen: 127.0.0.1:8080\")", path, root.Line)
	}
	var entries []configEntry
	err := eachYAMLPair(root, func(k string, key, val *yaml.Node) error {
		v, err := yamlToJSON(val)
		if err != nil {
			return fmt.Errorf("key %q: %w", k, err)
		}
		raw, err := json.Marshal(v)
		if err != nil {
			return &yamlNodeError{val.Line, fmt.Sprintf("key %q: %v", k, err)}
		}
		entries = append(entries, configEntry{key: k, raw: raw, at: fmt.Sprintf("%s:%d", path, key.Line)})
		return nil
	})
	if err != nil {
		var ne *yamlNodeError
		if errors.As(err, &ne) {
			return nil, fmt.Errorf("config: %s:%d: %v", path, ne.line, err)
		}
		return nil, fmt.Errorf("config: %s: %v", path, err)
	}
	return entries, nil
}

// yamlNodeError is YAML in a config file that has no JSON equivalent, at
// its line.
type yamlNodeError struct {
	line int
	msg  string
}

func (e *yamlNodeError) Error() string { return e.msg }

// yamlMessage is a YAML library error without its "yaml: " prefix.
func yamlMessage(err error) string {
	return strings.TrimPrefix(err.Error(), "yaml: ")
}

// eachYAMLPair calls f with every key of mapping m, which must be a
// string, not repeated and not a merge key ("<<").
func eachYAMLPair(m *yaml.Node, f func(k string, key, val *yaml.Node) error) error {
	if len(m.Content)%2 != 0 {
		return &yamlNodeError{m.Line, "a mapping with a key but no value"}
	}
	seen := map[string]int{}
	for i := 0; i < len(m.Content); i += 2 {
		key, val := m.Content[i], m.Content[i+1]
		if err := yamlPlain(key); err != nil {
			return err
		}
		switch tag := key.ShortTag(); {
		case key.Kind != yaml.ScalarNode:
			return &yamlNodeError{key.Line, "a key that is a " + yamlKindName(key.Kind) + ", not a string; keys are flag names"}
		case tag == "!!merge":
			return &yamlNodeError{key.Line, `merge key "<<" has no JSON equivalent; write the keys out`}
		case tag != "!!str":
			name := key.Value
			if name == "" {
				name = "(empty)"
			}
			return &yamlNodeError{key.Line, fmt.Sprintf("key %s is not a string (YAML reads it as %s); keys are flag names, quote it if it is one", name, tag)}
		}
		if first, ok := seen[key.Value]; ok {
			return &yamlNodeError{key.Line, fmt.Sprintf("key %q repeated (first on line %d)", key.Value, first)}
		}
		seen[key.Value] = key.Line
		if err := f(key.Value, key, val); err != nil {
			return err
		}
	}
	return nil
}

// yamlPlain refuses anchors and aliases, which JSON has no form for.
func yamlPlain(n *yaml.Node) error {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		return &yamlNodeError{n.Line, "anchors and aliases (&name, *name) have no JSON equivalent; write the value out"}
	}
	return nil
}

func yamlKindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "sequence"
	case yaml.DocumentNode:
		return "document"
	}
	return "node"
}

// yamlToJSON is the value, as encoding/json represents it, that the YAML
// node n stands for.
func yamlToJSON(n *yaml.Node) (any, error) {
	if err := yamlPlain(n); err != nil {
		return nil, err
	}
	tag := n.ShortTag()
	switch {
	case n.Kind == yaml.SequenceNode && tag == "!!seq":
		items := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := yamlToJSON(c)
			if err != nil {
				return nil, err
			}
			items = append(items, v)
		}
		return items, nil
	case n.Kind == yaml.MappingNode && tag == "!!map":
		obj := map[string]any{}
		err := eachYAMLPair(n, func(k string, _, val *yaml.Node) error {
			v, err := yamlToJSON(val)
			obj[k] = v
			return err
		})
		if err != nil {
			return nil, err
		}
		return obj, nil
	case n.Kind != yaml.ScalarNode:
		return nil, &yamlNodeError{n.Line, fmt.Sprintf("a %s tagged %s has no JSON equivalent", yamlKindName(n.Kind), tag)}
	}
	switch tag {
	case "!!str", "!!timestamp":
		return n.Value, nil // a timestamp is the string it was written as
	case "!!null":
		return nil, nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return nil, &yamlNodeError{n.Line, yamlMessage(err)}
		}
		return b, nil
	case "!!int":
		var x any
		if err := n.Decode(&x); err != nil {
			return nil, &yamlNodeError{n.Line, yamlMessage(err)}
		}
		switch x.(type) {
		case int, int64, uint64:
			return json.Number(fmt.Sprint(x)), nil
		}
		return nil, &yamlNodeError{n.Line, fmt.Sprintf("integer %s out of range", n.Value)}
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil {
			return nil, &yamlNodeError{n.Line, yamlMessage(err)}
		}
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, &yamlNodeError{n.Line, fmt.Sprintf("%s has no JSON equivalent", n.Value)}
		}
		return f, nil
	}
	return nil, &yamlNodeError{n.Line, fmt.Sprintf("tag %s has no JSON equivalent", tag)}
}

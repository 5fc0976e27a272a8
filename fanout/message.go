package fanout

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/heraldgw/herald/internal/names"
)

// ValidateKey checks both names of a key (the error wraps ErrInvalidKey);
// every broker and the Redis key layout rely on them (no '/' in a tenant,
// no braces or newlines anywhere). A Broker checks the key of every call.
func ValidateKey(k Key) error {
	if err := names.ValidateTenant(k.Tenant); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidKey, err)
	}
	if err := names.ValidateChannel(k.Channel); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidKey, err)
	}
	return nil
}

// NewPublication validates msg (the error wraps ErrInvalidMessage) and returns a publication that owns its
// bytes: Data and Freshness are compacted into fresh memory, so a caller
// that reuses its buffers cannot change the history. A zero Time becomes
// now. The fence is checked and dropped (the caller reads it from msg). The
// position is left for the broker to assign. A Broker's Publish starts
// with it.
func NewPublication(msg Message, now time.Time) (Publication, error) {
	if err := ValidateKey(msg.Key); err != nil {
		return Publication{}, fmt.Errorf("fanout: publish: %w: %v", ErrInvalidMessage, err)
	}
	if msg.ID == "" {
		return Publication{}, fmt.Errorf("fanout: publish: %w: id is empty", ErrInvalidMessage)
	}
	if msg.Type == "" {
		return Publication{}, fmt.Errorf("fanout: publish: %w: type is empty", ErrInvalidMessage)
	}
	if msg.Fence.Scope == "" && msg.Fence != (Fence{}) {
		return Publication{}, fmt.Errorf("fanout: publish: %w: fence has no scope", ErrInvalidMessage)
	}
	msg.Fence = Fence{}
	data, err := compactCopy(msg.Data)
	if err != nil {
		return Publication{}, fmt.Errorf("fanout: publish: %w: data is not valid JSON: %v", ErrInvalidMessage, err)
	}
	msg.Data = data
	switch {
	case msg.Freshness == nil:
	case string(msg.Freshness) == immediateFreshness:
		// The common freshness: no copy of its own (the history's
		// publications share this one, which nothing writes to).
		msg.Freshness = immediateFreshnessBytes
	default:
		f, err := compactCopy(msg.Freshness)
		if err != nil {
			return Publication{}, fmt.Errorf("fanout: publish: %w: freshness is not valid JSON: %v", ErrInvalidMessage, err)
		}
		msg.Freshness = f
	}
	if msg.Time.IsZero() {
		msg.Time = now
	}
	msg.Time = msg.Time.UTC()
	return Publication{Message: msg}, nil
}

// compactCopy validates raw and returns a compacted copy.
func compactCopy(raw json.RawMessage) (json.RawMessage, error) {
	out, ok := appendCompactJSON(make([]byte, 0, len(raw)), raw)
	if !ok {
		// Ask encoding/json for a precise reason (position and cause).
		if err := json.Unmarshal(raw, new(json.RawMessage)); err != nil {
			return nil, err
		}
		return nil, errors.New("invalid JSON")
	}
	return out, nil
}

// NewEpoch returns a fresh random epoch, for a Broker that starts or
// resets a channel's stream: 16 hex digits, which need no JSON
// escaping (the Redis publish script splices the epoch in unescaped).
func NewEpoch() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

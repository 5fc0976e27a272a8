package fanout

import (
	"encoding/json"
	"fmt"
	"time"
)

// wireEnvelope mirrors the publication envelope (docs/protocol.md) for decoding.
type wireEnvelope struct {
	ID            string          `json:"id"`
	Channel       string          `json:"channel"`
	Offset        uint64          `json:"offset"`
	Epoch         string          `json:"epoch"`
	Type          string          `json:"type"`
	SchemaVersion int             `json:"schema_version"`
	Time          time.Time       `json:"time"`
	Freshness     json.RawMessage `json:"freshness"`
	Data          json.RawMessage `json:"data"`
}

// DecodeEnvelope parses one publication envelope (docs/protocol.md), for tests, tools and clients
// written in Go. The envelope carries no tenant, so the returned Key has an
// empty Tenant. Freshness is returned as sent (never nil for an envelope
// Herald wrote). Time is in UTC.
func DecodeEnvelope(b []byte) (Publication, error) {
	var w wireEnvelope
	if err := json.Unmarshal(b, &w); err != nil {
		return Publication{}, fmt.Errorf("fanout: decode envelope: %w: %v", ErrInvalidEnvelope, err)
	}
	switch {
	case w.ID == "":
		return Publication{}, fmt.Errorf("fanout: decode envelope: %w: id is missing", ErrInvalidEnvelope)
	case w.Channel == "":
		return Publication{}, fmt.Errorf("fanout: decode envelope: %w: channel is missing", ErrInvalidEnvelope)
	case w.Offset == 0:
		return Publication{}, fmt.Errorf("fanout: decode envelope: %w: offset is missing or 0", ErrInvalidEnvelope)
	case w.Epoch == "":
		return Publication{}, fmt.Errorf("fanout: decode envelope: %w: epoch is missing", ErrInvalidEnvelope)
	case len(w.Data) == 0:
		return Publication{}, fmt.Errorf("fanout: decode envelope: %w: data is missing", ErrInvalidEnvelope)
	}
	return Publication{
		Message: Message{
			ID:            w.ID,
			Key:           Key{Channel: w.Channel},
			Type:          w.Type,
			SchemaVersion: w.SchemaVersion,
			Time:          w.Time.UTC(),
			Freshness:     w.Freshness,
			Data:          w.Data,
		},
		Position: Position{Offset: w.Offset, Epoch: w.Epoch},
	}, nil
}

// PreparedFromEnvelope decodes an envelope that a Broker received already
// encoded (from another node, through Redis) and keeps its bytes as the
// Prepared's JSON, so it is not encoded again; tenant is the publication's
// tenant, which the envelope does not carry. The error is DecodeEnvelope's.
func PreparedFromEnvelope(tenant string, envelope []byte) (*Prepared, error) {
	pub, err := DecodeEnvelope(envelope)
	if err != nil {
		return nil, err
	}
	pub.Key.Tenant = tenant
	return &Prepared{pub: pub, json: envelope}, nil
}

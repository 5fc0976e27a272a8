package sse

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/gateway/internal/session"
)

// A cursor is the opaque resume position of a stream: for every channel of
// the stream, the epoch and offset of the last publication written (or the
// channel's position when the stream began). It is carried as the SSE id.
//
// Format, version 1 (base64url without padding of):
//
//	byte     version (1)
//	uvarint  number of distinct epochs E
//	E times: uvarint length, epoch bytes (at most 255)
//	uvarint  number of entries N
//	N times: 4 bytes  FNV-1a 32 of "tenant/channel", big endian
//	         uvarint  index of the entry's epoch in the epoch table
//	         uvarint  offset
//
// Channels are identified only by the hash, so a cursor made for another
// tenant or another channel list maps nothing (those channels start live),
// and epochs shared by many channels are stored once. Two channels of one
// stream may share a hash (about 2·10⁻⁶ for a stream of 128 channels, and
// anyone can find such pairs): the cursor then holds two entries with that
// hash, which parses like any other, and covers neither channel (Resume):
// both start live. A 32-bit hash keeps the id written with every
// publication short; the rare collision costs a resume, never a refusal.
const (
	cursorVersion    = 1
	maxCursorLen     = 16 << 10 // encoded characters
	maxCursorEntries = 4096
	maxEpochLen      = 255
)

// ErrBadCursor is wrapped by every resume-cursor parse error (the
// gateway's ErrBadCursor).
var ErrBadCursor = errors.New("bad cursor")

// Cursor is a parsed resume position.
type Cursor []session.CursorEntry

// Lookup returns the position stored for key: false when no entry has
// its hash, or more than one (two channels of the stream share it, so
// neither entry can be told to be key's).
func (c Cursor) Lookup(key fanout.Key) (fanout.Position, bool) {
	return c.lookupHash(session.ChannelHash(key))
}

func (c Cursor) lookupHash(h uint32) (fanout.Position, bool) {
	var pos fanout.Position
	found := false
	for _, e := range c {
		if e.Hash == h {
			if found {
				return fanout.Position{}, false
			}
			pos, found = e.Pos, true
		}
	}
	return pos, found
}

// Resume returns, for each of a stream's channels of tenant, the position
// the cursor holds for it, or nil where it covers it not: no entry has
// its hash; or it is ambiguous, because more than one entry has that hash,
// or another of channels shares it (an entry could be either channel's).
// Such channels start live. A nil cursor covers nothing.
func (c Cursor) Resume(tenant string, channels []string) []*fanout.Position {
	out := make([]*fanout.Position, len(channels))
	if len(c) == 0 {
		return out
	}
	hashes := make([]uint32, len(channels))
	for i, ch := range channels {
		hashes[i] = session.ChannelHash(fanout.Key{Tenant: tenant, Channel: ch})
	}
	for i, h := range hashes {
		shared := false
		for j, o := range hashes {
			if j != i && o == h {
				shared = true
				break
			}
		}
		if shared {
			continue
		}
		if pos, ok := c.lookupHash(h); ok {
			out[i] = &pos
		}
	}
	return out
}

// appendCursor appends the binary (not yet base64) form of entries to dst.
// epochs is scratch space reused between calls.
func appendCursor(dst []byte, entries []session.CursorEntry, epochs []string) ([]byte, []string) {
	epochs = epochs[:0]
	for _, e := range entries {
		if indexOf(epochs, e.Pos.Epoch) < 0 {
			epochs = append(epochs, e.Pos.Epoch)
		}
	}
	dst = append(dst, cursorVersion)
	dst = binary.AppendUvarint(dst, uint64(len(epochs)))
	for _, ep := range epochs {
		if len(ep) > maxEpochLen {
			ep = ep[:maxEpochLen] // never produced by a sane broker; keeps the cursor parseable
		}
		dst = binary.AppendUvarint(dst, uint64(len(ep)))
		dst = append(dst, ep...)
	}
	dst = binary.AppendUvarint(dst, uint64(len(entries)))
	for _, e := range entries {
		dst = binary.BigEndian.AppendUint32(dst, e.Hash)
		dst = binary.AppendUvarint(dst, uint64(indexOf(epochs, e.Pos.Epoch)))
		dst = binary.AppendUvarint(dst, e.Pos.Offset)
	}
	return dst, epochs
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

// CursorEncoder encodes a connection's cursors into reused buffers, so
// writing an id costs no allocation once the buffers have grown.
type CursorEncoder struct {
	raw    []byte
	text   []byte
	epochs []string
}

// appendText appends the textual cursor of entries to dst.
func (e *CursorEncoder) appendText(dst []byte, entries []session.CursorEntry) []byte {
	e.raw, e.epochs = appendCursor(e.raw[:0], entries, e.epochs)
	return base64.RawURLEncoding.AppendEncode(dst, e.raw)
}

// Encode returns the textual cursor of entries; the bytes are valid until
// the next call.
func (e *CursorEncoder) Encode(entries []session.CursorEntry) []byte {
	e.text = e.appendText(e.text[:0], entries)
	return e.text
}

// ParseCursor decodes a textual cursor. It never panics.
func ParseCursor(s string) (Cursor, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("gateway: %w: "+format, append([]any{ErrBadCursor}, a...)...)
	}
	if s == "" {
		return nil, bad("empty")
	}
	if len(s) > maxCursorLen {
		return nil, bad("longer than %d characters", maxCursorLen)
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, bad("not base64url: %v", err)
	}
	r := cursorReader{b: raw}
	if v := r.byte(); r.err == nil && v != cursorVersion {
		return nil, bad("unknown version %d", v)
	}
	nEpochs := r.count("epoch count", maxCursorEntries)
	epochs := make([]string, 0, min(nEpochs, 64))
	for i := 0; i < nEpochs && r.err == nil; i++ {
		n := r.count("epoch length", maxEpochLen)
		epochs = append(epochs, string(r.bytes(n)))
	}
	nEntries := r.count("entry count", maxCursorEntries)
	entries := make(Cursor, 0, min(nEntries, 128))
	for i := 0; i < nEntries && r.err == nil; i++ {
		var e session.CursorEntry
		e.Hash = r.uint32()
		idx := r.count("epoch index", maxCursorEntries)
		e.Pos.Offset = r.uvarint()
		if r.err != nil {
			break
		}
		if idx >= len(epochs) {
			return nil, bad("entry %d names epoch %d of %d", i, idx, len(epochs))
		}
		e.Pos.Epoch = epochs[idx]
		entries = append(entries, e)
	}
	if r.err != nil {
		return nil, bad("%v", r.err)
	}
	if len(r.b) != 0 {
		return nil, bad("%d trailing bytes", len(r.b))
	}
	return entries, nil
}

// cursorReader consumes a byte slice; the first failure sticks in err.
type cursorReader struct {
	b   []byte
	err error
}

func (r *cursorReader) byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) < 1 {
		r.err = fmt.Errorf("truncated")
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *cursorReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = fmt.Errorf("truncated or overlong number")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *cursorReader) count(what string, limit int) int {
	v := r.uvarint()
	if r.err == nil && v > uint64(limit) {
		r.err = fmt.Errorf("%s %d exceeds %d", what, v, limit)
		return 0
	}
	return int(v)
}

func (r *cursorReader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if len(r.b) < n {
		r.err = fmt.Errorf("truncated")
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *cursorReader) uint32() uint32 {
	b := r.bytes(4)
	if r.err != nil {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}

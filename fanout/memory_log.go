package fanout

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"time"
)

// The history log's records. A file is logMagic followed by frames; a
// frame is the payload's length (4 bytes, little endian), its CRC-32C
// (4 bytes) and the payload, whose first byte is its kind:
//
//	recReset: tenant, channel, epoch, top, lastActive — the channel's
//	          stream is (re)started: this epoch, this top, no history
//	recPub:   tenant, channel, epoch, offset, lastActive, id, type,
//	          schema version, time, freshness, data — one publication
//	recClose: nothing — the writer closed the file after syncing it all
//	recFail:  nothing — the writer failed: the log is not whole
//
// Strings and byte strings are a uvarint length and the bytes (freshness
// and data: length+1, 0 meaning nil); numbers are varints.
const (
	recReset = 'E'
	recPub   = 'P'
	recClose = 'C'
	recFail  = 'F'
)

// logMagic starts every segment and snapshot file (and names the format's
// version); a length byte and the boot id the file was written in (none
// in a snapshot) follow it.
const logMagic = "HERALDH1"

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// errTorn is a frame that is cut short or fails its checksum: the end of
// what a writer got onto the disk.
var errTorn = errors.New("torn or corrupt record")

// logRecord is one decoded record.
type logRecord struct {
	kind       byte
	key        Key
	epoch      string
	offset     uint64 // recReset: the top; recPub: the publication's offset
	lastActive int64
	msg        Message
}

// beginFrame reserves a frame header in buf; endFrame fills it in.
func beginFrame(buf []byte) ([]byte, int) {
	start := len(buf)
	return append(buf, 0, 0, 0, 0, 0, 0, 0, 0), start
}

// endFrame writes the checksum before the length: in a mapped segment a
// record whose length is still zero reads as the end of the records, so a
// process killed while appending leaves either a whole record or none.
func endFrame(buf []byte, start int) []byte {
	payload := buf[start+8:]
	binary.LittleEndian.PutUint32(buf[start+4:], crc32.Checksum(payload, crcTable))
	binary.LittleEndian.PutUint32(buf[start:], uint32(len(payload)))
	return buf
}

func appendString(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
}

// appendOptBytes writes b with length+1, so nil and empty differ.
func appendOptBytes(buf []byte, b []byte) []byte {
	if b == nil {
		return append(buf, 0)
	}
	buf = binary.AppendUvarint(buf, uint64(len(b))+1)
	return append(buf, b...)
}

// appendResetRecord appends a recReset frame.
func appendResetRecord(buf []byte, key Key, epoch string, top uint64, lastActive int64) []byte {
	buf, start := beginFrame(buf)
	buf = append(buf, recReset)
	buf = appendString(buf, key.Tenant)
	buf = appendString(buf, key.Channel)
	buf = appendString(buf, epoch)
	buf = binary.AppendUvarint(buf, top)
	buf = binary.AppendVarint(buf, lastActive)
	return endFrame(buf, start)
}

// appendPubRecord appends a recPub frame.
func appendPubRecord(buf []byte, p *Publication, lastActive int64) []byte {
	buf, start := beginFrame(buf)
	buf = append(buf, recPub)
	buf = appendString(buf, p.Key.Tenant)
	buf = appendString(buf, p.Key.Channel)
	buf = appendString(buf, p.Epoch)
	buf = binary.AppendUvarint(buf, p.Offset)
	buf = binary.AppendVarint(buf, lastActive)
	buf = appendString(buf, p.ID)
	buf = appendString(buf, p.Type)
	buf = binary.AppendVarint(buf, int64(p.SchemaVersion))
	buf = binary.AppendVarint(buf, p.Time.UnixNano())
	buf = appendOptBytes(buf, p.Freshness)
	buf = appendOptBytes(buf, p.Data)
	return endFrame(buf, start)
}

// appendCloseRecord appends a recClose frame.
func appendCloseRecord(buf []byte) []byte {
	buf, start := beginFrame(buf)
	buf = append(buf, recClose)
	return endFrame(buf, start)
}

// appendFailRecord appends a recFail frame.
func appendFailRecord(buf []byte) []byte {
	buf, start := beginFrame(buf)
	buf = append(buf, recFail)
	return endFrame(buf, start)
}

// nextFrame splits the first frame off b: its payload and the rest. At the
// end of the records (the end of b, or a zero length: the unused part of a
// segment, or a record whose header was not yet written) it returns a nil
// payload and no error.
func nextFrame(b []byte) (payload, rest []byte, err error) {
	if len(b) < 8 {
		return nil, nil, nil
	}
	n := binary.LittleEndian.Uint32(b)
	if n == 0 {
		return nil, nil, nil
	}
	if uint64(n) > uint64(len(b)-8) {
		return nil, nil, errTorn
	}
	payload = b[8 : 8+n]
	if crc32.Checksum(payload, crcTable) != binary.LittleEndian.Uint32(b[4:]) {
		return nil, nil, errTorn
	}
	return payload, b[8+n:], nil
}

// recordReader decodes one payload; the first failure sticks.
type recordReader struct {
	b   []byte
	bad bool
}

func (r *recordReader) uvarint() uint64 { return readVarint(r, binary.Uvarint) }

func (r *recordReader) varint() int64 { return readVarint(r, binary.Varint) }

// readVarint takes one number off r with decode (binary.Uvarint or
// binary.Varint).
func readVarint[T int64 | uint64](r *recordReader, decode func([]byte) (T, int)) T {
	v, n := decode(r.b)
	if n <= 0 {
		r.bad, r.b = true, nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *recordReader) bytes(n uint64) []byte {
	if n > uint64(len(r.b)) {
		r.bad, r.b = true, nil
		return nil
	}
	out := r.b[:n:n]
	r.b = r.b[n:]
	return out
}

func (r *recordReader) string() string { return string(r.bytes(r.uvarint())) }

// optBytes reads what appendOptBytes wrote, copied.
func (r *recordReader) optBytes() []byte {
	n := r.uvarint()
	if n == 0 {
		return nil
	}
	return append([]byte(nil), r.bytes(n-1)...)
}

// decodeRecord reads a payload that passed its checksum.
func decodeRecord(payload []byte) (logRecord, error) {
	r := recordReader{b: payload[1:]}
	rec := logRecord{kind: payload[0]}
	switch rec.kind {
	case recClose, recFail:
	case recReset:
		rec.key = Key{Tenant: r.string(), Channel: r.string()}
		rec.epoch = r.string()
		rec.offset = r.uvarint()
		rec.lastActive = r.varint()
	case recPub:
		rec.key = Key{Tenant: r.string(), Channel: r.string()}
		rec.epoch = r.string()
		rec.offset = r.uvarint()
		rec.lastActive = r.varint()
		rec.msg = Message{Key: rec.key, ID: r.string(), Type: r.string(), SchemaVersion: int(r.varint())}
		rec.msg.Time = time.Unix(0, r.varint()).UTC()
		rec.msg.Freshness = r.optBytes()
		rec.msg.Data = r.optBytes()
	default:
		return logRecord{}, errTorn
	}
	if r.bad || len(r.b) != 0 {
		return logRecord{}, errTorn
	}
	return rec, nil
}

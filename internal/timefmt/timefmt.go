// Package timefmt writes the one time layout Herald puts on the wire (the
// publication envelope's and the webhook body's "time") without
// time.Time.AppendFormat, which interprets its layout on every call: a
// leaf, for the broker and the webhook sender alike.
package timefmt

import "time"

// Layout is RFC 3339 in UTC with exactly nine fractional digits, so every
// time has the same length and sorts as text (time.RFC3339Nano would drop
// trailing zeros).
const Layout = "2006-01-02T15:04:05.000000000Z07:00"

// Append appends t in UTC as Layout writes it
// (2006-01-02T15:04:05.000000000Z), digit by digit: about a third of
// AppendFormat's time. A year outside 0–9999 goes through AppendFormat.
func Append(b []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.AppendFormat(b, Layout)
	}
	hour, minute, sec := t.Clock()
	b = appendDigits(b, year, 4)
	b = append(b, '-')
	b = appendDigits(b, int(month), 2)
	b = append(b, '-')
	b = appendDigits(b, day, 2)
	b = append(b, 'T')
	b = appendDigits(b, hour, 2)
	b = append(b, ':')
	b = appendDigits(b, minute, 2)
	b = append(b, ':')
	b = appendDigits(b, sec, 2)
	b = append(b, '.')
	b = appendDigits(b, t.Nanosecond(), 9)
	return append(b, 'Z')
}

// appendDigits appends v (≥ 0, below 10^n) in exactly n decimal digits.
func appendDigits(b []byte, v, n int) []byte {
	start := len(b)
	for range n {
		b = append(b, 0)
	}
	for i := len(b) - 1; i >= start; i-- {
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return b
}

package fanout

// maxJSONDepth bounds nesting, as encoding/json does.
const maxJSONDepth = 10000

// appendCompactJSON appends src without insignificant whitespace and
// reports whether src is exactly one valid JSON value (RFC 8259 grammar;
// like encoding/json, bytes inside strings are not checked for UTF-8). On
// false, dst is returned unchanged. It does what json.Compact does, about
// four times faster, because the envelope of every publication goes
// through it.
func appendCompactJSON(dst, src []byte) ([]byte, bool) {
	orig := len(dst)
	var stackBuf [32]byte
	stack := stackBuf[:0] // open containers: '{' or '['
	i := skipSpace(src, 0)

value:
	if i >= len(src) {
		return dst[:orig], false
	}
	switch c := src[i]; {
	case c == '{' || c == '[':
		if len(stack) >= maxJSONDepth {
			return dst[:orig], false
		}
		stack = append(stack, c)
		dst = append(dst, c)
		i = skipSpace(src, i+1)
		if i < len(src) && src[i] == c+2 { // '}' is '{'+2, ']' is '['+2
			dst = append(dst, c+2)
			stack = stack[:len(stack)-1]
			i++
			goto after
		}
		if c == '{' {
			goto key
		}
		goto value
	case c == '"':
		var ok bool
		if dst, i, ok = appendJSONStringToken(dst, src, i); !ok {
			return dst[:orig], false
		}
	case c == '-' || c >= '0' && c <= '9':
		j, ok := scanNumber(src, i)
		if !ok {
			return dst[:orig], false
		}
		dst = append(dst, src[i:j]...)
		i = j
	case c == 't' || c == 'f' || c == 'n':
		lit := "null"
		if c == 't' {
			lit = "true"
		} else if c == 'f' {
			lit = "false"
		}
		if len(src)-i < len(lit) || string(src[i:i+len(lit)]) != lit {
			return dst[:orig], false
		}
		dst = append(dst, lit...)
		i += len(lit)
	default:
		return dst[:orig], false
	}

after:
	i = skipSpace(src, i)
	if len(stack) == 0 {
		if i != len(src) {
			return dst[:orig], false
		}
		return dst, true
	}
	if i >= len(src) {
		return dst[:orig], false
	}
	switch top := stack[len(stack)-1]; src[i] {
	case ',':
		dst = append(dst, ',')
		i = skipSpace(src, i+1)
		if top == '{' {
			goto key
		}
		goto value
	case top + 2:
		dst = append(dst, top+2)
		stack = stack[:len(stack)-1]
		i++
		goto after
	default:
		return dst[:orig], false
	}

key:
	if i >= len(src) || src[i] != '"' {
		return dst[:orig], false
	}
	{
		var ok bool
		if dst, i, ok = appendJSONStringToken(dst, src, i); !ok {
			return dst[:orig], false
		}
	}
	i = skipSpace(src, i)
	if i >= len(src) || src[i] != ':' {
		return dst[:orig], false
	}
	dst = append(dst, ':')
	i = skipSpace(src, i+1)
	goto value
}

func skipSpace(src []byte, i int) int {
	for i < len(src) {
		switch src[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// appendJSONStringToken copies the string literal starting at src[i] (a
// '"') and returns the index after it.
func appendJSONStringToken(dst, src []byte, i int) ([]byte, int, bool) {
	start := i
	i++
	for i < len(src) {
		c := src[i]
		switch {
		case c == '"':
			return append(dst, src[start:i+1]...), i + 1, true
		case c < 0x20:
			return dst, i, false
		case c == '\\':
			if i+1 >= len(src) {
				return dst, i, false
			}
			switch src[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(src) || !isHex(src[i+2]) || !isHex(src[i+3]) || !isHex(src[i+4]) || !isHex(src[i+5]) {
					return dst, i, false
				}
				i += 6
			default:
				return dst, i, false
			}
		default:
			i++
		}
	}
	return dst, i, false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// scanNumber returns the index after the number starting at src[i]:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber(src []byte, i int) (int, bool) {
	if src[i] == '-' {
		i++
	}
	switch {
	case i < len(src) && src[i] == '0':
		i++
	case i < len(src) && src[i] >= '1' && src[i] <= '9':
		i = scanDigits(src, i)
	default:
		return i, false
	}
	if i < len(src) && src[i] == '.' {
		j := scanDigits(src, i+1)
		if j == i+1 {
			return i, false
		}
		i = j
	}
	if i < len(src) && (src[i] == 'e' || src[i] == 'E') {
		i++
		if i < len(src) && (src[i] == '+' || src[i] == '-') {
			i++
		}
		j := scanDigits(src, i)
		if j == i {
			return i, false
		}
		i = j
	}
	return i, true
}

func scanDigits(src []byte, i int) int {
	for i < len(src) && src[i] >= '0' && src[i] <= '9' {
		i++
	}
	return i
}

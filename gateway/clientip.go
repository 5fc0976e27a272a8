package gateway

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// Client addresses behind reverse proxies (Config.TrustedProxies).
//
// A request's client is its TCP peer unless that peer is a trusted proxy.
// Then the forwarding header names the hops: Forwarded (RFC 7239, its for=
// parameters) when the request has one, else X-Forwarded-For, every line
// of it, in order. The hops are read from the right, the proxy nearest to
// Herald first: a hop that is itself a trusted proxy is skipped, and the
// first one that is not is the client. Everything to its left was written
// by the client or by proxies Herald does not know, and is never read, so
// a client cannot choose its address by sending the header itself. When
// every hop is trusted the leftmost is the client. A hop that is not an IP
// address ("unknown", an obfuscated "_name", garbage) ends the walk: the
// client is the last address read, at worst the peer. Headers from a peer
// that is not trusted are ignored entirely.

// maxForwardedHops bounds the hops read from one request's forwarding
// header; past it the walk stops as at a hop that is not an address.
const maxForwardedHops = 32

// client is where a request came from: withClient resolves it once.
type client struct {
	// addr is the client's IP, unmapped and without zone; invalid when
	// RemoteAddr holds no IP (then no per-address limit applies).
	addr netip.Addr
	// remote is the client for logs and Conn.remote: RemoteAddr when the
	// client is the TCP peer, else the address (and port, when the header
	// gave one) that the forwarding header named.
	remote string
}

type clientKey struct{}

// withClient resolves the client of every request before next runs
// (resolveClient), so the limiter, the logs and Conn.remote all see the
// same one. r.RemoteAddr is left as it is.
func (s *Server) withClient(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := resolveClient(r.RemoteAddr, r.Header, s.trusted)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), clientKey{}, c)))
	})
}

// clientOf returns the client withClient resolved for r; for a request
// that did not pass through it, its TCP peer.
func clientOf(r *http.Request) client {
	if c, ok := r.Context().Value(clientKey{}).(client); ok {
		return c
	}
	return resolveClient(r.RemoteAddr, nil, nil)
}

// trustedProxies is Config.TrustedProxies, normalized: masked, and an
// IPv4-mapped IPv6 prefix turned into its IPv4 prefix, since addresses
// are compared unmapped.
type trustedProxies []netip.Prefix

func newTrustedProxies(ps []netip.Prefix) trustedProxies {
	out := make(trustedProxies, 0, len(ps))
	for _, p := range ps {
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		out = append(out, p.Masked())
	}
	return out
}

func (t trustedProxies) contains(a netip.Addr) bool {
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// resolveClient finds the client of a request from its RemoteAddr and,
// when that peer is trusted, its forwarding headers (see the top of this
// file). It never fails: the worst answer is the peer itself.
func resolveClient(remoteAddr string, h http.Header, trusted trustedProxies) client {
	c := client{remote: remoteAddr}
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil {
		return c
	}
	c.addr = peer.Unmap().WithZone("")
	if !trusted.contains(c.addr) {
		return c
	}
	vals, forwarded := h.Values("Forwarded"), true
	if !hasContent(vals) {
		vals, forwarded = h.Values("X-Forwarded-For"), false
	}
	walkHops(vals, forwarded, func(hop string) bool {
		if forwarded {
			v, ok := forwardedFor(hop)
			if !ok {
				return false
			}
			hop = v
		}
		a, remote, ok := parseNode(hop)
		if !ok {
			return false
		}
		c = client{addr: a, remote: remote}
		return trusted.contains(a)
	})
	return c
}

// hasContent reports whether any of vals holds more than whitespace.
func hasContent(vals []string) bool {
	for _, v := range vals {
		if trimOWS(v) != "" {
			return true
		}
	}
	return false
}

// walkHops calls visit with the non-empty elements of the comma-separated
// lists vals (header lines, in order), the rightmost first, until visit
// returns false or maxForwardedHops were visited. When quoted (Forwarded),
// a comma inside a quoted-string does not separate elements; a quote left
// open runs to the end of its line, whose last element is then malformed.
// Lines are split apart, so a quote one line leaves open cannot swallow a
// line a proxy added after it.
func walkHops(vals []string, quoted bool, visit func(string) bool) {
	var ring [maxForwardedHops]string // a line's last elements
	visited := 0
	for li := len(vals) - 1; li >= 0; li-- {
		line, n := vals[li], 0
		keep := func(e string) {
			if e = trimOWS(e); e != "" {
				ring[n%maxForwardedHops] = e
				n++
			}
		}
		start, inQuote := 0, false
		for i := 0; i < len(line); i++ {
			switch b := line[i]; {
			case quoted && inQuote && b == '\\':
				i++ // quoted-pair: the next byte is literal
			case quoted && b == '"':
				inQuote = !inQuote
			case b == ',' && !inQuote:
				keep(line[start:i])
				start = i + 1
			}
		}
		keep(line[start:])
		for i := n - 1; i >= 0 && i >= n-maxForwardedHops; i-- {
			if visited == maxForwardedHops {
				return
			}
			visited++
			if !visit(ring[i%maxForwardedHops]) {
				return
			}
		}
	}
}

// forwardedFor returns the value of the for parameter of one Forwarded
// element (pairs name=value separated by ";", a value a token or a
// quoted-string), unquoted. ok is false when the element is malformed,
// has no for, or has it twice.
func forwardedFor(elem string) (string, bool) {
	var val string
	found := false
	rest := elem
	for {
		eq := strings.IndexByte(rest, '=')
		if eq < 0 {
			return "", false
		}
		name := trimOWS(rest[:eq])
		if !isToken(name) {
			return "", false
		}
		rest = trimOWS(rest[eq+1:])
		var v string
		if strings.HasPrefix(rest, `"`) {
			var ok bool
			if v, rest, ok = unquote(rest); !ok {
				return "", false
			}
		} else {
			end := strings.IndexByte(rest, ';')
			if end < 0 {
				end = len(rest)
			}
			v, rest = trimOWS(rest[:end]), rest[end:]
			if v == "" || strings.ContainsRune(v, '"') {
				return "", false
			}
		}
		if strings.EqualFold(name, "for") {
			if found {
				return "", false
			}
			val, found = v, true
		}
		rest = trimOWS(rest)
		if rest == "" {
			return val, found
		}
		if rest[0] != ';' {
			return "", false
		}
		if rest = trimOWS(rest[1:]); rest == "" {
			return val, found // a trailing ";"
		}
	}
}

// unquote reads the quoted-string s starts with and returns its content
// and what follows it; ok is false when it is not closed.
func unquote(s string) (val, rest string, ok bool) {
	var b []byte // only when the string holds a quoted-pair
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '"':
			if b == nil {
				return s[1:i], s[i+1:], true
			}
			return string(b), s[i+1:], true
		case '\\':
			if i+1 == len(s) {
				return "", "", false
			}
			if b == nil {
				b = append([]byte(nil), s[1:i]...)
			}
			i++
			b = append(b, s[i])
		default:
			if b != nil {
				b = append(b, s[i])
			}
		}
	}
	return "", "", false
}

// parseNode reads one hop: an IP address, optionally with a port, as in
// Forwarded's for= ("192.0.2.1", "192.0.2.1:80", "[2001:db8::1]",
// "[2001:db8::1]:443", an obfuscated port "_p") and X-Forwarded-For (which
// also holds bare IPv6 addresses). It returns the address, unmapped and
// without zone, and its form for logs. ok is false for anything else,
// "unknown" and obfuscated identifiers ("_hidden") included.
func parseNode(s string) (a netip.Addr, remote string, ok bool) {
	port, hasPort := "", false
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, "", false
		}
		var err error
		if a, err = netip.ParseAddr(s[1:end]); err != nil || !a.Is6() {
			return netip.Addr{}, "", false
		}
		switch after := s[end+1:]; {
		case after == "":
		case after[0] == ':':
			port, hasPort = after[1:], true
		default:
			return netip.Addr{}, "", false
		}
	} else if p, err := netip.ParseAddr(s); err == nil {
		a = p
	} else {
		i := strings.IndexByte(s, ':')
		if i < 0 || strings.IndexByte(s[i+1:], ':') >= 0 {
			return netip.Addr{}, "", false
		}
		if a, err = netip.ParseAddr(s[:i]); err != nil || !a.Is4() {
			return netip.Addr{}, "", false
		}
		port, hasPort = s[i+1:], true
	}
	a = a.Unmap().WithZone("")
	switch {
	case !hasPort:
		return a, a.String(), true
	case strings.HasPrefix(port, "_") && obfuscated(port[1:]):
		return a, a.String(), true // the port is hidden; the address is not
	case len(port) <= 5 && digits(port):
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return netip.Addr{}, "", false
		}
		return a, netip.AddrPortFrom(a, uint16(n)).String(), true
	}
	return netip.Addr{}, "", false
}

// obfuscated reports whether s is the rest of an obfuscated identifier
// (RFC 7239 §6.3: ALPHA, DIGIT, ".", "_", "-"), at least one byte long.
func obfuscated(s string) bool {
	return allBytes(s, func(b byte) bool { return alnum(b) || b == '.' || b == '_' || b == '-' })
}

func digits(s string) bool {
	return allBytes(s, func(b byte) bool { return b >= '0' && b <= '9' })
}

// isToken reports whether s is an HTTP token (RFC 9110 §5.6.2).
func isToken(s string) bool {
	return allBytes(s, func(b byte) bool { return alnum(b) || strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0 })
}

// allBytes reports whether s is at least one byte long and ok holds for
// every byte of it.
func allBytes(s string, ok func(b byte) bool) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return false
		}
	}
	return true
}

// alnum reports whether b is an ASCII letter or digit.
func alnum(b byte) bool { return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' }

// trimOWS trims HTTP optional whitespace (spaces and tabs).
func trimOWS(s string) string { return strings.Trim(s, " \t") }

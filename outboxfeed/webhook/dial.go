package webhook

import (
	"fmt"
	"net/netip"
	"syscall"
)

// specialRange is one range of addresses a webhook may not reach unless
// allow_private_network is set.
type specialRange struct {
	prefix netip.Prefix
	what   string // "a loopback address", … completing "<addr> is …"
}

// specialRanges are the refused ranges: the IANA IPv4 and IPv6
// special-purpose address registries' entries that are not globally
// reachable, and multicast. IPv4-mapped IPv6 addresses (::ffff:a.b.c.d)
// are checked as the IPv4 address they map; NAT64 (64:ff9b::/96) and 6to4
// (2002::/16) addresses as the IPv4 address they embed.
var specialRanges = func() []specialRange {
	table := []struct{ prefix, what string }{
		{"0.0.0.0/8", `in "this network" 0.0.0.0/8 (RFC 791)`},
		{"10.0.0.0/8", "a private address (RFC 1918)"},
		{"100.64.0.0/10", "in the shared address space 100.64.0.0/10 (CGNAT, RFC 6598)"},
		{"127.0.0.0/8", "a loopback address"},
		{"169.254.0.0/16", "a link-local address (cloud metadata services live at 169.254.169.254)"},
		{"172.16.0.0/12", "a private address (RFC 1918)"},
		{"192.0.0.0/24", "an IETF protocol assignment (192.0.0.0/24)"},
		{"192.0.2.0/24", "a documentation address (TEST-NET-1)"},
		{"192.88.99.0/24", "the deprecated 6to4 relay anycast range"},
		{"192.168.0.0/16", "a private address (RFC 1918)"},
		{"198.18.0.0/15", "a benchmarking address (RFC 2544)"},
		{"198.51.100.0/24", "a documentation address (TEST-NET-2)"},
		{"203.0.113.0/24", "a documentation address (TEST-NET-3)"},
		{"224.0.0.0/4", "a multicast address"},
		{"240.0.0.0/4", "a reserved address (240.0.0.0/4, broadcast included)"},
		{"::1/128", "a loopback address"},
		{"::/96", "a deprecated IPv4-compatible address"},
		{"64:ff9b:1::/48", "a local-use NAT64 address (RFC 8215)"},
		{"100::/64", "a discard-only address (RFC 6666)"},
		{"2001::/23", "an IETF protocol assignment (2001::/23, Teredo included)"},
		{"2001:db8::/32", "a documentation address"},
		{"3fff::/20", "a documentation address"},
		{"5f00::/16", "a segment-routing (SRv6) identifier"},
		{"fc00::/7", "a unique local address (RFC 4193; fd00:ec2::254 is a cloud metadata service)"},
		{"fe80::/10", "a link-local address"},
		{"fec0::/10", "a deprecated site-local address"},
		{"ff00::/8", "a multicast address"},
	}
	out := make([]specialRange, len(table))
	for i, r := range table {
		out[i] = specialRange{netip.MustParsePrefix(r.prefix), r.what}
	}
	return out
}()

var (
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour   = netip.MustParsePrefix("2002::/16")
)

// SpecialAddress reports why addr is one a webhook may not reach unless
// allow_private_network is set ("a loopback address", "a private address
// (RFC 1918)", …), or "" when addr is globally reachable.
func SpecialAddress(addr netip.Addr) string {
	addr = addr.Unmap().WithZone("")
	if !addr.IsValid() {
		return "not an IP address"
	}
	if addr.IsUnspecified() {
		return "the unspecified address"
	}
	if addr.Is6() {
		b := addr.As16()
		switch {
		case nat64Prefix.Contains(addr):
			if why := SpecialAddress(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})); why != "" {
				return "a NAT64 address of " + netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}).String() + ", " + why
			}
			return ""
		case sixToFour.Contains(addr):
			if why := SpecialAddress(netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})); why != "" {
				return "a 6to4 address of " + netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}).String() + ", " + why
			}
			return ""
		}
	}
	for _, r := range specialRanges {
		if r.prefix.Contains(addr) {
			return r.what
		}
	}
	return ""
}

// refuseSpecial is a net.Dialer Control function: it runs once the
// address is resolved, before each connect, so what is checked is the
// address actually connected to (DNS rebinding cannot slip past it).
func refuseSpecial(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s: not an IP address and port", ErrAddressRefused, address)
	}
	if why := SpecialAddress(ap.Addr()); why != "" {
		return fmt.Errorf("%w: %s is %s; set allow_private_network: true to allow it", ErrAddressRefused, ap.Addr(), why)
	}
	return nil
}

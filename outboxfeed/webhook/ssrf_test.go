package webhook

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
)

// SSRF: with allow_private_network false (the default), a connection to
// a loopback, private, link-local or metadata address is refused when it
// is dialled, whatever the url says; nothing reaches a server listening
// there. With allow_private_network true the same url delivers.
func TestSSRFRefusedByDefault(t *testing.T) {
	v4 := newReceiver(t, nil)
	_, port, _ := net.SplitHostPort(v4.Listener.Addr().String())
	v6 := newV6Receiver(t)
	_, port6, _ := net.SplitHostPort(v6.Listener.Addr().String())

	for _, tc := range []struct {
		name, url, addr string
		live            func() int64 // the connections of a server at the address, or nil
	}{
		{"loopback", "http://127.0.0.1:" + port + "/hook", "127.0.0.1", v4.conns.Load},
		{"name resolving to loopback", "http://localhost:" + port + "/hook", "127.0.0.1", v4.conns.Load},
		{"IPv4-mapped loopback", "http://[::ffff:127.0.0.1]:" + port + "/hook", "127.0.0.1", v4.conns.Load},
		{"IPv6 loopback", "http://[::1]:" + port6 + "/hook", "::1", v6.conns.Load},
		{"private", "http://10.20.30.40:8080/hook", "10.20.30.40", nil},
		{"metadata", "http://169.254.169.254/latest/meta-data/", "169.254.169.254", nil},
		{"IPv6 metadata", "http://[fd00:ec2::254]/latest/meta-data/", "fd00:ec2::254", nil},
		{"IPv4-mapped private", "http://[::ffff:192.168.1.1]/hook", "192.168.1.1", nil},
		{"CGNAT", "http://100.64.0.1/hook", "100.64.0.1", nil},
		{"unspecified", "http://0.0.0.0:" + port + "/hook", "0.0.0.0", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before int64
			if tc.live != nil {
				before = tc.live()
			}
			cfg := testConfig(tc.url)
			cfg.AllowPrivateNetwork = false
			e := newEndpoint(t, cfg)
			r := deliver(t, e, testMessage("m-ssrf"))
			wantClass(t, r, ClassOutage, ReasonAddressRefused)
			msg := r.Err.Error()
			if !errors.Is(r.Err, ErrAddressRefused) || !strings.Contains(msg, tc.addr+" is ") || !strings.Contains(msg, "allow_private_network") {
				t.Fatalf("err %q: want it to name %s and allow_private_network", msg, tc.addr)
			}
			if tc.live != nil {
				if n := tc.live() - before; n != 0 {
					t.Fatalf("the server got %d connections", n)
				}
				cfg.AllowPrivateNetwork = true
				e := newEndpoint(t, cfg)
				wantClass(t, deliver(t, e, testMessage("m-allowed")), ClassDelivered, ReasonAccepted)
			}
		})
	}
}

// v6Receiver is a server on [::1].
type v6Receiver struct {
	*httptest.Server
	conns atomic.Int64
}

func newV6Receiver(t *testing.T) *v6Receiver {
	t.Helper()
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Fatalf("listen on [::1] (the SSRF tests need IPv6 loopback): %v", err)
	}
	rc := &v6Receiver{}
	rc.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	rc.Listener.Close()
	rc.Listener = ln
	countConns(rc.Server, &rc.conns)
	rc.Start()
	t.Cleanup(rc.Close)
	return rc
}

func TestSpecialAddress(t *testing.T) {
	refused := []string{
		"127.0.0.1", "127.255.0.9", "10.0.0.1", "172.16.0.1", "172.31.255.255", "192.168.0.1",
		"169.254.169.254", "169.254.0.1", "100.64.0.1", "100.127.255.254", "0.0.0.0", "0.1.2.3",
		"224.0.0.1", "239.255.255.250", "255.255.255.255", "240.0.0.1", "192.0.2.1", "198.51.100.1",
		"203.0.113.1", "198.18.0.1", "192.0.0.8",
		"::", "::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254", "::127.0.0.1",
		"fc00::1", "fd00:ec2::254", "fe80::1", "fe80::1%eth0", "ff02::1", "2001:db8::1", "fec0::1",
		"64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "2002:7f00:1::1", "2002:c0a8:101::", "64:ff9b:1::1",
		"100::1", "2001::1", "3fff::1",
	}
	allowed := []string{
		"8.8.8.8", "1.1.1.1", "93.184.216.34", "172.32.0.1", "100.128.0.1", "169.255.0.1",
		"2606:4700:4700::1111", "2a00:1450:4001::200e", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1",
	}
	for _, s := range refused {
		if why := SpecialAddress(netip.MustParseAddr(s)); why == "" {
			t.Errorf("%s is not refused", s)
		}
	}
	for _, s := range allowed {
		if why := SpecialAddress(netip.MustParseAddr(s)); why != "" {
			t.Errorf("%s is refused: %s", s, why)
		}
	}
	if why := SpecialAddress(netip.MustParseAddr("169.254.169.254")); !strings.Contains(why, "link-local") {
		t.Errorf("169.254.169.254: %q", why)
	}
}

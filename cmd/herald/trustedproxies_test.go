package main

import (
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseTrustedProxies(t *testing.T) {
	got, err := parseTrustedProxies([]string{"127.0.0.1/32", "10.0.0.0/8", "192.0.2.7", "::ffff:192.0.2.8", "2001:db8::/32", "::1"})
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{
		netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("192.0.2.7/32"), netip.MustParsePrefix("192.0.2.8/32"),
		netip.MustParsePrefix("2001:db8::/32"), netip.MustParsePrefix("::1/128"),
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parsed %v, want %v", got, want)
	}
	if got, err := parseTrustedProxies(nil); err != nil || got != nil {
		t.Fatalf("no entries: %v, %v", got, err)
	}
	for entry, why := range map[string]string{
		"10.0.0.300":      "neither an IP address nor a CIDR prefix",
		"10.0.0.0/33":     "neither an IP address nor a CIDR prefix",
		"proxy.internal":  "neither an IP address nor a CIDR prefix",
		"fe80::1%eth0":    "neither an IP address nor a CIDR prefix",
		"10.0.0.1/8":      "write 10.0.0.0/8, or 10.0.0.1/32 for the one address",
		"2001:db8::1/32":  "write 2001:db8::/32",
		"127.0.0.1:8080":  "neither an IP address nor a CIDR prefix",
		"127.0.0.1/32/32": "neither an IP address nor a CIDR prefix",
	} {
		_, err := parseTrustedProxies([]string{"127.0.0.1", entry})
		if err == nil || !strings.Contains(err.Error(), "--trusted-proxies") ||
			!strings.Contains(err.Error(), `"`+entry+`"`) || !strings.Contains(err.Error(), why) {
			t.Errorf("%q: %v; want an error naming --trusted-proxies, the entry and %q", entry, err, why)
		}
	}
}

// TestTrustedProxiesBadValue: a bad entry stops serve, from the flag, the
// environment or the config file, with an error naming the flag and the
// entry.
func TestTrustedProxiesBadValue(t *testing.T) {
	st := newSettings("serve")
	var o serveOptions
	o.register(st)
	clearSettingsEnv(t, st)
	base := []string{"serve", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--jwt-hmac-secret", testSecret}
	check := func(how string, args ...string) {
		t.Helper()
		code, _, errOut := herald(t, append(append([]string{}, base...), args...)...)
		if code != 1 || !strings.Contains(errOut, "--trusted-proxies") || !strings.Contains(errOut, `"10.0.0.0/33"`) {
			t.Errorf("%s: exit %d, stderr %q", how, code, errOut)
		}
	}
	check("flag", "--trusted-proxies", "127.0.0.1,10.0.0.0/33")

	t.Setenv("HERALD_TRUSTED_PROXIES", "127.0.0.1, 10.0.0.0/33")
	check("environment")
	os.Unsetenv("HERALD_TRUSTED_PROXIES")

	path := filepath.Join(t.TempDir(), "herald.json")
	if err := os.WriteFile(path, []byte(`{"trusted-proxies": ["127.0.0.1", "10.0.0.0/33"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	check("config file", "--config", path)
}

// TestTrustedProxiesServe: herald serve --trusted-proxies makes the
// per-address limit key on the client X-Forwarded-For names when the peer
// is a trusted proxy.
func TestTrustedProxiesServe(t *testing.T) {
	check := func(base, xff string, want int) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, base+"/v1/sse?channel=orders/1", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer bad")
		req.Header.Set("X-Forwarded-For", xff)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("%s with X-Forwarded-For %s: %d, want %d", base, xff, resp.StatusCode, want)
		}
	}
	limit := []string{"--connect-attempts-per-ip", "0.001", "--connect-attempts-burst", "1"}
	behind := startServe(t, append(limit, "--trusted-proxies", "10.0.0.0/8,127.0.0.1")...)
	check(behind, "198.51.100.1", http.StatusUnauthorized)
	check(behind, "198.51.100.2", http.StatusUnauthorized)
	check(behind, "198.51.100.1", http.StatusTooManyRequests)

	direct := startServe(t, limit...)
	check(direct, "198.51.100.1", http.StatusUnauthorized)
	check(direct, "198.51.100.2", http.StatusTooManyRequests)
}

package testenv

import (
	"net"
	"strconv"
	"testing"
)

// FreePort is a loopback TCP port nothing listens on as it returns (the
// kernel's choice), for a server the test starts.
func FreePort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// FreeAddr is 127.0.0.1:FreePort.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	return "127.0.0.1:" + strconv.Itoa(FreePort(tb))
}

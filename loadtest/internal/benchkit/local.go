package benchkit

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
)

// FreePort asks the kernel for a free loopback port, for a child server
// to listen on.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// RandomHex is n random bytes in hexadecimal: a secret or an API key for a
// child server.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

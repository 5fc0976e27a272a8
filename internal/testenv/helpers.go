package testenv

import (
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Eventually polls cond every few milliseconds until it holds, failing tb
// after timeout.
func Eventually(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
	}
}

// MetricValue reads the value of one counter or gauge series.
func MetricValue(tb testing.TB, m prometheus.Metric) float64 {
	tb.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		tb.Fatal(err)
	}
	switch {
	case out.Counter != nil:
		return out.Counter.GetValue()
	case out.Gauge != nil:
		return out.Gauge.GetValue()
	}
	tb.Fatalf("not a counter or gauge: %v", m.Desc())
	return 0
}

// TCPPair returns both ends of a loopback TCP connection, closed when tb
// ends, with the server's send buffer and the client's receive buffer
// set to bufSize, so a writer that is not read from soon fills them.
func TCPPair(tb testing.TB, bufSize int) (server, client *net.TCPConn) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	sc := <-accepted
	if sc == nil {
		tb.Fatal("accept failed")
	}
	server, client = sc.(*net.TCPConn), cc.(*net.TCPConn)
	tb.Cleanup(func() { server.Close(); client.Close() })
	if err := server.SetWriteBuffer(bufSize); err != nil {
		tb.Fatal(err)
	}
	if err := client.SetReadBuffer(bufSize); err != nil {
		tb.Fatal(err)
	}
	return server, client
}

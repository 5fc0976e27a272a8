package hookrecv

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"
)

// The receiver answers 204 to every POST and counts what it answered.
func TestServe(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan int)
	go func() { done <- serve(inR, outW); outW.Close() }()
	out := bufio.NewReader(outR)
	line, err := out.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if !ok {
		t.Fatalf("first line %q", line)
	}
	for range 3 {
		resp, err := http.Post("http://"+addr+"/hooks/herald", "application/json", strings.NewReader(`{"a":1}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	http.DefaultClient.CloseIdleConnections()
	inW.Close()
	line, err = out.ReadString('\n')
	if err != nil || line != "answered 3\n" {
		t.Fatalf("last line %q, %v", line, err)
	}
	if rc := <-done; rc != 0 {
		t.Fatalf("exit %d", rc)
	}
}

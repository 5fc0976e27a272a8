package hookrecv

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
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
	f := NewFloor("http://"+addr+"/hooks/herald", 2)
	for range 3 {
		if err := f.Post([]byte(`{"a":1}`)); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	inW.Close()
	line, err = out.ReadString('\n')
	if err != nil || line != "answered 3\n" {
		t.Fatalf("last line %q, %v", line, err)
	}
	if rc := <-done; rc != 0 {
		t.Fatalf("exit %d", rc)
	}
}

// A Floor takes only 204 for an answer.
func TestFloorRefusesOtherStatus(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	f := NewFloor(srv.URL, 1)
	defer f.Close()
	if err := f.Post([]byte(`{}`)); err == nil || err.Error() != "status 200" {
		t.Fatalf("Post to a server answering 200: %v; want status 200", err)
	}
}

package hookrecv

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
)

// Floor is what a webhook sender is measured against: a bare net/http
// client POSTing ready-made bodies to a receiver over kept-alive
// connections, doing nothing else. Post is safe for concurrent use.
type Floor struct {
	url    string
	tr     *http.Transport
	client *http.Client
}

// NewFloor returns a Floor POSTing to url that keeps up to conns idle
// connections (as many as its callers' concurrency).
func NewFloor(url string, conns int) *Floor {
	tr := &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns}
	return &Floor{url: url, tr: tr, client: &http.Client{Transport: tr}}
}

// Post POSTs body as application/json and reads the answer to its end;
// an answer other than 204 No Content is an error.
func (f *Floor) Post(body []byte) error {
	resp, err := f.client.Post(f.url, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// Close closes the Floor's idle connections.
func (f *Floor) Close() { f.tr.CloseIdleConnections() }

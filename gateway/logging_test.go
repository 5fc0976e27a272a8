package gateway

import (
	"net/url"
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	u, _ := url.Parse("/v1/sse?channel=a&access_token=eyJsecret&last_event_id=AQ")
	got := redactURL(u)
	if strings.Contains(got, "eyJsecret") || !strings.Contains(got, "access_token=REDACTED") || !strings.Contains(got, "channel=a") {
		t.Fatalf("redactURL = %q", got)
	}
	u, _ = url.Parse("/v1/sse?access_token=eyJsecret&x=%zz")
	if got := redactURL(u); strings.Contains(got, "eyJsecret") {
		t.Fatalf("unparseable query leaked: %q", got)
	}
	u, _ = url.Parse("/healthz")
	if got := redactURL(u); got != "/healthz" {
		t.Fatalf("redactURL = %q", got)
	}
}

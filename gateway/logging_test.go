package gateway

import (
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"
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

func TestRateLimitedLog(t *testing.T) {
	var buf syncBuffer
	l := newRateLimitedLog(slog.New(slog.NewTextHandler(&buf, nil)), time.Minute, 2)
	clock := time.Unix(1000, 0)
	l.now = func() time.Time { return clock }
	for range 10 {
		l.Log(slog.LevelWarn, "conn closed")
	}
	l.Log(slog.LevelWarn, "other message")
	if n := strings.Count(buf.String(), "conn closed"); n != 2 {
		t.Fatalf("%d lines in one window, want 2:\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), "other message") {
		t.Fatal("limits are per message")
	}
	l.Log(slog.LevelDebug, "below the level") // not even counted
	clock = clock.Add(time.Minute)
	l.Log(slog.LevelWarn, "conn closed")
	if !strings.Contains(buf.String(), "suppressed_before=8") {
		t.Fatalf("no suppressed count after the window:\n%s", buf.String())
	}
	if strings.Contains(buf.String(), "below the level") {
		t.Fatal("a message below the handler's level was written")
	}
}

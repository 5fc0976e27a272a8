package envelope

import (
	"testing"
	"time"
)

func TestAppendTyped(t *testing.T) {
	got := AppendTyped([]byte("{"), "invoice.paid", 2, time.Date(2025, 3, 1, 10, 15, 30, 5, time.FixedZone("CET", 3600)))
	want := `{"type":"invoice.paid","schema_version":2,"time":"2025-03-01T09:15:30.000000005Z","freshness":`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

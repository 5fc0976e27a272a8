package storekit

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/heraldgw/herald/outboxfeed"
)

func TestStateColumnsRefuseImpossibleRows(t *testing.T) {
	owner, msg := "w", "boom"
	now := time.Now()
	for name, c := range map[string]StateColumns{
		"processing without lease": {State: outboxfeed.StateProcessing},
		"pending with lease":       {State: outboxfeed.StatePending, LeaseOwner: &owner, LeaseExpiresAt: &now},
		"dispatched without time":  {State: outboxfeed.StateDispatched},
		"dead letter no reason":    {State: outboxfeed.StateDeadLetter, DeadLetteredAt: &now},
		"dead letter with lease":   {State: outboxfeed.StateDeadLetter, DeadLetteredAt: &now, LastError: &msg, LeaseOwner: &owner},
		"unknown":                  {State: "lost"},
	} {
		if s, err := c.Decode(); !errors.Is(err, outboxfeed.ErrCorruptRecord) {
			t.Errorf("%s: Decode = %#v, %v; want outboxfeed.ErrCorruptRecord", name, s, err)
		}
	}
	s, err := (&StateColumns{State: outboxfeed.StateDeadLetter, DeadLetteredAt: &now, LastError: &msg, Attempt: 4}).Decode()
	if dl, ok := s.(outboxfeed.DeadLetter); err != nil || !ok || dl.Reason != "boom" || dl.Attempts != 4 || dl.Name() != "dead_letter" {
		t.Fatalf("dead letter = %#v, %v", s, err)
	}
}
func TestTruncateErrorKeepsTextStorable(t *testing.T) {
	long := strings.Repeat("a", MaxErrorLen-1) + "é tail"
	got := TruncateError(long)
	if !utf8.ValidString(got) || len(got) > MaxErrorLen+len("…") {
		t.Fatalf("cut inside a rune or too long: %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
	if got := TruncateError("bad \xff byte and \x00 nul"); !utf8.ValidString(got) || strings.ContainsRune(got, 0) {
		t.Fatalf("%q is not storable text", got)
	}
}

package pgstore

import (
	"strconv"
	"testing"
	"unsafe"
)

func TestInternedTextSharesEqualValues(t *testing.T) {
	table := map[string]string{}
	a, b := internedText{table: table}, internedText{table: table}
	buf := []byte("acme")
	if err := a.ScanBytes(buf); err != nil || !a.valid || a.s != "acme" {
		t.Fatalf("scan = %q %v %v", a.s, a.valid, err)
	}
	copy(buf, "xxxx") // the driver reuses its memory
	if a.s != "acme" {
		t.Fatalf("the scanned string aliases the driver's memory: %q", a.s)
	}
	if err := b.ScanBytes([]byte("acme")); err != nil || unsafe.StringData(b.s) != unsafe.StringData(a.s) {
		t.Fatal("an equal value was not shared")
	}
	if err := b.ScanBytes(nil); err != nil || b.valid || b.s != "" {
		t.Fatalf("NULL scanned as %q valid=%v", b.s, b.valid)
	}
	for i := range 2 * maxInterned {
		if err := a.ScanBytes([]byte(strconv.Itoa(i))); err != nil || a.s != strconv.Itoa(i) {
			t.Fatalf("scan %d = %q, %v", i, a.s, err)
		}
	}
	if len(table) > maxInterned {
		t.Fatalf("the table grew to %d entries, bound %d", len(table), maxInterned)
	}
}

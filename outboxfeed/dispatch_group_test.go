package outboxfeed

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/heraldgw/herald/fanout"
)

// groupByChannel groups the indexes of each channel's records in their
// order, channels in the order they first come; it leaves out the passed
// records and holds a blocked channel's records from the position, not
// its queued ones.
func TestGroupByChannel(t *testing.T) {
	rec := func(ch string, queued int64) Record { return Record{TenantID: "t", Channel: ch, Queued: queued} }
	recs := []Record{rec("a", 0), rec("b", 0), rec("a", 0), rec("c", 0), rec("b", 0), rec("x", 3), rec("x", 0), rec("a", 0), rec("d", 0)}
	out := make([]Outcome, len(recs))
	out[3] = Outcome{Kind: OutcomeDone, Passed: true} // c: routed elsewhere
	blocked := map[fanout.Key]struct{}{{Tenant: "t", Channel: "x"}: {}}
	got := groupByChannel(recs, blocked, out)
	want := [][]int{{0, 2, 7}, {1, 4}, {5}, {8}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("groups %v, want %v", got, want)
	}
	if out[6].Kind != OutcomeHold || out[5] != (Outcome{}) || !out[3].Passed {
		t.Fatalf("outcomes %+v", out)
	}
	// A group appended to stays apart from the next one's indexes.
	got[0] = append(got[0], 99)
	if got[1][0] != 1 {
		t.Fatalf("appending to a group changed the next: %v", got[1])
	}
	if g := groupByChannel(recs[3:4], nil, out[3:4]); len(g) != 0 {
		t.Fatalf("only passed records: groups %v", g)
	}
}

// BenchmarkGroupByChannel groups a batch of 10,000 records over 1,000
// channels, as the drain's batches come.
func BenchmarkGroupByChannel(b *testing.B) {
	recs := make([]Record, 10000)
	for i := range recs {
		recs[i] = Record{TenantID: "bench", Channel: fmt.Sprintf("c%d", i%1000)}
	}
	out := make([]Outcome, len(recs))
	b.ReportAllocs()
	for b.Loop() {
		if g := groupByChannel(recs, nil, out); len(g) != 1000 {
			b.Fatal(len(g))
		}
	}
}

package redisbroker

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/fanout/fanouttest"
	"github.com/heraldgw/herald/internal/testenv"
)

// BenchmarkRedisPublish measures one Publish (the Lua script round trip)
// against the test Redis, with no subscribers, of a typical notification
// (a nested channel and a ~250-byte payload).
func BenchmarkRedisPublish(b *testing.B) {
	url, prefix := testenv.Redis(b)
	rb, err := New(Config{URL: url, KeyPrefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	defer rb.Stop()
	m := fanouttest.Msg(fanout.Key{Tenant: "acme", Channel: "users/u-1234/orders"}, "")
	m.SchemaVersion = 3
	m.Data = json.RawMessage(`{"order_id":"ord_8f2c1a","status":"shipped","carrier":"ups",` +
		`"tracking":"1Z999AA10123456784","items":[{"sku":"A-1","qty":2},{"sku":"B-7","qty":1}],` +
		`"total":{"amount":"129.90","currency":"EUR"},"note":"Leave at the door \"please\""}`)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		m.ID = fmt.Sprint(i)
		if _, err := rb.Publish(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
}

package ws_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/gateway/internal/wstest"
)

// TestWSResumeRecovered: a client that subscribes with its last position
// gets every missed publication in order, then live ones, nothing twice.
func TestWSResumeRecovered(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := e.connected("orders/*")
	sub := c.Subscribe("orders/1", nil)
	for i := 1; i <= 3; i++ {
		e.publish("acme", "orders/1", fmt.Sprint(i))
	}
	var last fanout.Publication
	for range 3 {
		last = c.Pub()
	}
	c.Close()
	for i := 4; i <= 7; i++ {
		e.publish("acme", "orders/1", fmt.Sprint(i))
	}

	c = e.connected("orders/*")
	res := c.Subscribe("orders/1", &ws.Position{Offset: last.Offset, Epoch: last.Epoch})
	if !res.Recovered || res.Offset != 7 || res.Epoch != sub.Epoch {
		t.Fatalf("resumed subscribe = %+v, want recovered at offset 7", res)
	}
	for i := 4; i <= 7; i++ {
		if p := c.Pub(); p.Offset != uint64(i) || string(p.Data) != fmt.Sprint(i) {
			t.Fatalf("got offset %d data %s, want %d", p.Offset, p.Data, i)
		}
	}
	live := e.publish("acme", "orders/1", `"live"`)
	if p := c.Pub(); p.Offset != live.Offset {
		t.Fatalf("live offset %d, want %d", p.Offset, live.Offset)
	}
	// Resuming at the top recovers nothing and is still recovered.
	c2 := e.connected("orders/*")
	res = c2.Subscribe("orders/1", &ws.Position{Offset: live.Offset, Epoch: live.Epoch})
	if !res.Recovered || res.Offset != live.Offset {
		t.Fatalf("subscribe at the top = %+v", res)
	}
	c2.OK(c2.Request(ws.OpPing, nil), nil) // no publication came first
}

// TestWSResumeNotRecovered: a position the history no longer covers, or
// from another epoch, yields recovered:false at the channel's top and no
// publication from before it: the client must refresh its state.
func TestWSResumeNotRecovered(t *testing.T) {
	e := newEnv(t, envOptions{history: 5})
	first := e.publish("acme", "orders/1", `1`)
	for i := 2; i <= 10; i++ {
		e.publish("acme", "orders/1", fmt.Sprint(i))
	}
	for name, since := range map[string]ws.Position{
		"trimmed":     {Offset: first.Offset, Epoch: first.Epoch},
		"other epoch": {Offset: 9, Epoch: "an-epoch-of-another-life"},
	} {
		t.Run(name, func(t *testing.T) {
			c := e.connected("orders/*")
			top := mustTop(t, e, fanout.Key{Tenant: "acme", Channel: "orders/1"})
			res := c.Subscribe("orders/1", &since)
			if res.Recovered || res.Offset != top.Offset || res.Epoch != first.Epoch {
				t.Fatalf("subscribe = %+v, want recovered:false at offset %d", res, top.Offset)
			}
			c.OK(c.Request(ws.OpPing, nil), nil) // nothing partial was sent
			pub := e.publish("acme", "orders/1", `"next"`)
			if p := c.Pub(); p.Offset != pub.Offset {
				t.Fatalf("live offset %d, want %d", p.Offset, pub.Offset)
			}
		})
	}
}

// TestWSSubscribeDuringPublishing: subscriptions made while the channel is
// being published to, live or resumed, see every later publication
// exactly once and in order.
func TestWSSubscribeDuringPublishing(t *testing.T) {
	e := newEnv(t, envOptions{})
	const total = 300
	key := fanout.Key{Tenant: "acme", Channel: "orders/1"}
	e.publish("acme", "orders/1", `0`)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 2; i <= total; i++ {
			if _, err := e.broker.Publish(context.Background(), fanout.Message{
				ID: fmt.Sprint("m", i), Key: key, Type: "t", SchemaVersion: 1, Data: json.RawMessage(fmt.Sprint(i)),
			}); err != nil {
				t.Error(err)
				return
			}
		}
	})
	var clients []*wstest.Client
	var starts []uint64
	for i := range 8 {
		c := e.connected("orders/*")
		var res ws.SubscribeResult
		if i%2 == 0 {
			res = c.Subscribe("orders/1", &ws.Position{Offset: 1, Epoch: mustTop(t, e, key).Epoch})
			if !res.Recovered {
				t.Fatalf("resume from offset 1 not recovered: %+v", res)
			}
			starts = append(starts, 1)
		} else {
			res = c.Subscribe("orders/1", nil)
			starts = append(starts, res.Offset)
		}
		clients = append(clients, c)
	}
	wg.Wait()
	for i, c := range clients {
		for want := starts[i] + 1; want <= total; want++ {
			if p := c.Pub(); p.Offset != want {
				t.Fatalf("client %d (from %d): offset %d, want %d", i, starts[i], p.Offset, want)
			}
		}
		c.OK(c.Request(ws.OpPing, nil), nil) // and nothing more
	}
}

func mustTop(t *testing.T, e *testEnv, key fanout.Key) fanout.Position {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec, err := e.broker.Recover(ctx, key, fanout.Position{Epoch: session.NoEpoch}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return rec.Top
}

package fanout

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// The tests inside package fanout (hub_test.go, memory_persist_test.go,
// which reach unexported parts) cannot import fanouttest, which imports
// fanout; these are the few of its helpers they use, by the same rules.

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func msg(key Key, id string) Message {
	data := json.RawMessage(fmt.Sprintf(`{"id": %q}`, id))
	return Message{ID: id, Key: key, Type: "order.updated", SchemaVersion: 1, Data: data}
}

func mustPublish(t testing.TB, b Broker, m Message) Publication {
	t.Helper()
	p, err := b.Publish(testCtx(t), m)
	if err != nil {
		t.Fatalf("publish %s: %v", m.ID, err)
	}
	return p
}

func mustRecover(t testing.TB, b Broker, key Key, since Position) Recovery {
	t.Helper()
	r, err := b.Recover(testCtx(t), key, since, 0)
	if err != nil {
		t.Fatalf("recover %v from %v: %v", key, since, err)
	}
	return r
}

func offsets(pubs []Publication) []uint64 {
	out := make([]uint64, len(pubs))
	for i, p := range pubs {
		out[i] = p.Offset
	}
	return out
}

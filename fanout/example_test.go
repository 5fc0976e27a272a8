package fanout_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/heraldgw/herald/fanout"
)

// A node publishes to the in-memory broker, which gives each publication
// of a channel the next offset and keeps the last HistorySize of them. A
// client that missed publications resumes from the last position it saw:
// the history returns what came after it, a page at a time if asked, or
// says it no longer covers that position.
func ExampleMemoryBroker() {
	ctx := context.Background()
	broker, err := fanout.NewMemoryBroker(fanout.MemoryConfig{HistorySize: 3})
	if err != nil {
		log.Fatal(err)
	}
	defer broker.Stop()

	key := fanout.Key{Tenant: "acme", Channel: "orders/1"}
	var pubs []fanout.Publication
	for i := 1; i <= 5; i++ {
		p, err := broker.Publish(ctx, fanout.Message{
			ID: fmt.Sprintf("m%d", i), Key: key, Type: "order.updated", SchemaVersion: 1,
			Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)),
		})
		if err != nil {
			log.Fatal(err)
		}
		pubs = append(pubs, p)
	}
	fmt.Println("published up to offset", pubs[4].Offset)

	// A client that saw offset 3 gets 4 and 5.
	rec, err := broker.Recover(ctx, key, pubs[2].Position, 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("from 3: recovered", rec.Recovered)
	for _, p := range rec.Publications {
		fmt.Println(" ", p.Offset, p.ID, string(p.Data))
	}

	// The same, one page of one publication at a time.
	page, err := broker.Recover(ctx, key, pubs[2].Position, 1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("from 3, a page of 1:", page.Publications[0].Offset)

	// The history holds the last three only: offset 2 is gone, so a client
	// that saw offset 1 must refresh its state from the application, then
	// go on from the top.
	rec, err = broker.Recover(ctx, key, pubs[0].Position, 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("from 1: recovered", rec.Recovered, "top", rec.Top.Offset)
	// Output:
	// published up to offset 5
	// from 3: recovered true
	//   4 m4 {"n":4}
	//   5 m5 {"n":5}
	// from 3, a page of 1: 4
	// from 1: recovered false top 5
}

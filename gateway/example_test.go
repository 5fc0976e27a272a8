package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/gateway"
	"github.com/heraldgw/herald/subscriptions"
)

// An application embeds the gateway in its own HTTP server: one node, the
// in-memory broker, HS256 tokens, grants from the token only. Herald's
// routes (/v1/sse, /v1/ws, …) are mounted next to the application's. In
// production the outbox Worker (outboxfeed.NewWorker) publishes to the
// broker; here the example publishes directly.
func Example_embed() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	secret := []byte("change-me-to-32-random-bytes-or-more")

	broker, err := fanout.NewMemoryBroker(fanout.MemoryConfig{})
	if err != nil {
		log.Fatal(err)
	}
	hub, err := fanout.NewHub(broker, fanout.HubConfig{})
	if err != nil {
		log.Fatal(err)
	}
	if err := broker.Start(ctx, hub); err != nil {
		log.Fatal(err)
	}
	srv, err := gateway.New(gateway.Config{}, gateway.Deps{
		Verifier:   auth.NewHMACVerifier(secret, 0),
		Authorizer: &subscriptions.Authorizer{}, // token grants only
		Broker:     broker,
		Hub:        hub,
	})
	if err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("/api/hello", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello") })
	mux.Handle("/v1/", srv.Handler()) // SSE, WebSocket, tickets
	ts := httptest.NewServer(mux)     // the application's server; srv.Start is not used

	token, err := auth.MintHS256(secret, auth.Claims{
		Subject: "u1", Tenant: "acme", Subscribe: []string{"orders/*"}, ExpiresAt: time.Now().Add(time.Hour),
	})
	if err != nil {
		log.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+"/v1/sse?channel=orders/1", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	events := bufio.NewScanner(resp.Body)
	next := func(prefix string) string { // the next line starting with prefix
		for events.Scan() {
			if line, ok := strings.CutPrefix(events.Text(), prefix); ok {
				return line
			}
		}
		return ""
	}
	fmt.Println(resp.StatusCode, next("event: "))
	next("data: ") // the subscribed event's cursor

	if _, err := broker.Publish(ctx, fanout.Message{
		ID: "0f8fad5b-d9cb-469f-a165-70867728950e", Key: fanout.Key{Tenant: "acme", Channel: "orders/1"},
		Type: "order.updated", SchemaVersion: 1, Time: time.Now(), Data: json.RawMessage(`{"status":"paid"}`),
	}); err != nil {
		log.Fatal(err)
	}
	var env struct {
		Channel, Type string
		Data          json.RawMessage
	}
	if err := json.Unmarshal([]byte(next("data: ")), &env); err != nil {
		log.Fatal(err)
	}
	fmt.Println(env.Channel, env.Type, string(env.Data))

	resp.Body.Close()
	srv.Stop()
	ts.Close()
	broker.Stop()
	// Output:
	// 200 subscribed
	// orders/1 order.updated {"status":"paid"}
}

package gateway

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/sse"
)

func TestSSEResumeGetsExactlyTheMissedPublications(t *testing.T) {
	e := newEnv(t, envOptions{})
	tok := e.token("acme", "u1", "orders/*")
	s := e.stream(tok, "orders/1")
	for i := 1; i <= 3; i++ {
		e.publish("acme", "orders/1", fmt.Sprint(i))
	}
	var lastID string
	for i := 1; i <= 3; i++ {
		ev, p := s.publication(t)
		if p.Offset != uint64(i) {
			t.Fatalf("offset %d, want %d", p.Offset, i)
		}
		lastID = ev.ID
	}
	s.close()

	for i := 4; i <= 7; i++ {
		e.publish("acme", "orders/1", fmt.Sprint(i))
	}
	top := uint64(7)
	for _, via := range []string{"header", "query"} {
		t.Run(via, func(t *testing.T) {
			r := request{bearer: tok, query: q("channel", "orders/1")}
			if via == "header" {
				r.lastID = lastID
			} else {
				r.query.Set("last_event_id", lastID)
			}
			s := e.open(r)
			s.next(t, 5*time.Second)
			_, sub := s.subscribed(t)
			if !sub.Recovered || sub.Offset != top {
				t.Fatalf("subscribed = %+v, want recovered at offset %d", sub, top)
			}
			for i := 4; i <= int(top); i++ {
				if _, p := s.publication(t); p.Offset != uint64(i) {
					t.Fatalf("got offset %d data %s, want %d", p.Offset, p.Data, i)
				}
			}
			// Then live, with nothing repeated.
			pub := e.publish("acme", "orders/1", `"live"`)
			if _, p := s.publication(t); p.Offset != pub.Offset {
				t.Fatalf("live offset %d, want %d", p.Offset, pub.Offset)
			}
			top = pub.Offset
			s.close()
		})
	}
}

func TestSSEResumeFromSubscribedIDWithoutPublications(t *testing.T) {
	e := newEnv(t, envOptions{})
	tok := e.token("acme", "u1", "orders/*")
	s := e.open(request{bearer: tok, query: q("channel", "orders/1")})
	s.next(t, 5*time.Second)
	sev, _ := s.subscribed(t)
	s.close()
	e.publish("acme", "orders/1", `1`)
	e.publish("acme", "orders/1", `2`)

	r, subs := e.resume(tok, sev.ID, "orders/1")
	if sub := subs[0]; !sub.Recovered || sub.Offset != 2 {
		t.Fatalf("subscribed = %+v", sub)
	}
	for i := 1; i <= 2; i++ {
		if _, p := r.publication(t); p.Offset != uint64(i) {
			t.Fatalf("offset %d, want %d", p.Offset, i)
		}
	}
}

func TestSSEResumeBeyondHistoryIsNotPartial(t *testing.T) {
	e := newEnv(t, envOptions{history: 3})
	tok := e.token("acme", "u1", "orders/*")
	s := e.stream(tok, "orders/1")
	e.publish("acme", "orders/1", `1`)
	ev, _ := s.publication(t)
	s.close()
	for i := 2; i <= 6; i++ { // 2..6: five missed, history keeps 4..6
		e.publish("acme", "orders/1", fmt.Sprint(i))
	}
	r, subs := e.resume(tok, ev.ID, "orders/1")
	if sub := subs[0]; sub.Recovered || sub.Offset != 6 {
		t.Fatalf("subscribed = %+v, want recovered:false at the top (6)", sub)
	}
	// Nothing of the history follows: the next publication is live.
	e.publish("acme", "orders/1", `7`)
	if _, p := r.publication(t); p.Offset != 7 {
		t.Fatalf("got offset %d, want 7 (live) and nothing partial", p.Offset)
	}
}

func TestSSEResumeMapsOnlyTheCursorsChannels(t *testing.T) {
	e := newEnv(t, envOptions{})
	tok := e.token("acme", "u1", "orders/*")
	s := e.stream(tok, "orders/1")
	e.publish("acme", "orders/1", `1`)
	ev, _ := s.publication(t)
	s.close()
	e.publish("acme", "orders/1", `2`)
	e.publish("acme", "orders/2", `1`)

	// orders/2 is not in the cursor: it starts live; orders/1 recovers.
	r, subs := e.resume(tok, ev.ID, "orders/1", "orders/2")
	if s1, s2 := subs[0], subs[1]; !s1.Recovered || s1.Offset != 2 || s2.Recovered || s2.Offset != 1 {
		t.Fatalf("subscribed = %+v, %+v", s1, s2)
	}
	ev2, p := r.publication(t)
	if p.Key.Channel != "orders/1" || p.Offset != 2 {
		t.Fatalf("got %s@%d", p.Key.Channel, p.Offset)
	}
	r.close()

	// The new cursor covers both channels.
	e.publish("acme", "orders/1", `3`)
	e.publish("acme", "orders/2", `2`)
	r2, subs := e.resume(tok, ev2.ID, "orders/2", "orders/1")
	if a, b := subs[0], subs[1]; !a.Recovered || !b.Recovered {
		t.Fatalf("subscribed = %+v, %+v", a, b)
	}
	got := map[string]uint64{}
	for range 2 {
		_, p := r2.publication(t)
		got[p.Key.Channel] = p.Offset
	}
	if got["orders/1"] != 3 || got["orders/2"] != 2 {
		t.Fatalf("recovered %v", got)
	}

	// Another tenant presenting this cursor maps nothing.
	if _, subs := e.resume(e.token("globex", "u1", "orders/*"), ev2.ID, "orders/1"); subs[0].Recovered {
		t.Fatalf("a cursor of another tenant recovered %+v", subs[0])
	}
}

// TestSSEResumeUnderLoad reconnects repeatedly while a publisher runs: the
// publications seen across all connections are exactly 1..N, in order.
func TestSSEResumeUnderLoad(t *testing.T) {
	const total = 300
	e := newEnv(t, envOptions{history: total})
	tok := e.token("acme", "u1", "orders/*")

	// The first stream starts before the publisher, so it needs no history.
	s := e.stream(tok, "orders/1")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 1; i <= total && ctx.Err() == nil; i++ {
			if _, err := e.broker.Publish(ctx, fanout.Message{
				ID: fmt.Sprint(i), Key: fanout.Key{Tenant: "acme", Channel: "orders/1"},
				Type: "t", SchemaVersion: 1, Data: []byte(fmt.Sprint(i)),
			}); err != nil {
				return
			}
			if i%10 == 0 {
				time.Sleep(time.Millisecond) // let reconnects interleave with publishing
			}
		}
	})
	defer func() { cancel(); wg.Wait() }()

	next := uint64(1)
	for round := 0; next <= total; round++ {
		var lastID string
		for n := 0; n < 7+round%13 && next <= total; n++ {
			ev := s.nextEvent(t)
			if ev.Name == "subscribed" {
				lastID = ev.ID
				continue
			}
			p, err := fanout.DecodeEnvelope([]byte(ev.Data))
			if err != nil {
				t.Fatal(err)
			}
			if p.Offset != next {
				t.Fatalf("round %d: offset %d, want %d (gap or repeat)", round, p.Offset, next)
			}
			next++
			lastID = ev.ID
		}
		s.close()
		if next > total {
			break
		}
		s = e.open(request{bearer: tok, query: url.Values{"channel": {"orders/1"}}, lastID: lastID})
		s.next(t, 5*time.Second)
	}
}

// TestSSEResumeCollidingChannels: two channels of one stream whose names
// share the cursor's 32-bit hash (rooms/c987999 and rooms/c1132190 in
// tenant acme) make a cursor that the reconnect presents like any other:
// the stream opens, both channels start live (recovered: false,
// no_position) and the stream's other channel resumes.
func TestSSEResumeCollidingChannels(t *testing.T) {
	const a, b, lobby = "rooms/c987999", "rooms/c1132190", "rooms/lobby"
	if session.ChannelHash(fanout.Key{Tenant: "acme", Channel: a}) != session.ChannelHash(fanout.Key{Tenant: "acme", Channel: b}) {
		t.Fatalf("%s and %s do not collide", a, b)
	}
	e := newEnv(t, envOptions{})
	tok := e.token("acme", "u1", "rooms/*")
	channels := []string{a, lobby, b}
	s := e.stream(tok, channels...)
	for _, ch := range channels {
		e.publish("acme", ch, `1`)
	}
	var last sseEvent
	for range 3 {
		last, _ = s.publication(t)
	}
	s.close()
	for _, ch := range channels {
		e.publish("acme", ch, `2`)
	}

	r, subs := e.resume(tok, last.ID, channels...)
	for i, ch := range channels {
		sub := subs[i]
		want := sse.SubscribedEvent{Channel: ch, Recovered: false, Reason: session.RecoveryNoPosition.Code, Offset: 2}
		if ch == lobby {
			want.Recovered, want.Reason = true, ""
		}
		sub.Epoch = ""
		if sub != want {
			t.Fatalf("subscribed %+v, want %+v", sub, want)
		}
	}
	if _, p := r.publication(t); p.Key.Channel != lobby || p.Offset != 2 {
		t.Fatalf("recovered %s@%d, want %s@2", p.Key.Channel, p.Offset, lobby)
	}
	// Live publications go on, each with a cursor the next reconnect
	// presents again.
	e.publish("acme", a, `3`)
	ev, p := r.publication(t)
	if p.Key.Channel != a || p.Offset != 3 {
		t.Fatalf("live %s@%d, want %s@3", p.Key.Channel, p.Offset, a)
	}
	r.close()
	e.resume(tok, ev.ID, channels...)
}

package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/gateway/internal/wstest"
)

// The end-to-end authorization property: over random tenants, subjects,
// grant patterns, channels and publications, every SSE and WebSocket
// connection receives exactly the publications of its own tenant on the
// channels its grants allow and it subscribed to — in publication order,
// nothing more, also when it falls behind a tiny send queue and catches up
// from the history — and every subscription its grants do not allow is
// refused. The expectation comes from refMatch, a matcher written here
// from the channel-name and grant rules of docs/protocol.md, independent of the subscriptions package.

var (
	propSegments = []string{"a", "b", "u1", "u2"}
	propSubjects = []string{"u1", "u2"}
	propTenants  = []string{"t1", "t2"}
)

// refMatch reports whether grant pattern, for subject sub, allows channel:
// "*" is one segment, "**" (last only) one or more trailing segments,
// "{sub}" the subject, anything else itself.
func refMatch(pattern, sub, channel string) bool {
	ps, cs := strings.Split(pattern, "/"), strings.Split(channel, "/")
	for i, p := range ps {
		if p == "**" {
			return i == len(ps)-1 && len(cs) > i
		}
		if i >= len(cs) {
			return false
		}
		switch p {
		case "*":
		case "{sub}":
			if cs[i] != sub {
				return false
			}
		default:
			if cs[i] != p {
				return false
			}
		}
	}
	return len(ps) == len(cs)
}

func propChannel(r *rand.Rand) string {
	n := 1 + r.IntN(3)
	segs := make([]string, n)
	for i := range segs {
		segs[i] = propSegments[r.IntN(len(propSegments))]
	}
	return strings.Join(segs, "/")
}

func propGrant(r *rand.Rand) string {
	if r.IntN(10) == 0 {
		return "**"
	}
	n := 1 + r.IntN(3)
	segs := make([]string, n)
	for i := range segs {
		switch x := r.IntN(20); {
		case i == n-1 && x < 4:
			segs[i] = "**"
		case x < 7:
			segs[i] = "*"
		case x < 10:
			segs[i] = "{sub}"
		default:
			segs[i] = propSegments[r.IntN(len(propSegments))]
		}
	}
	return strings.Join(segs, "/")
}

// propConn is one random connection and what it must receive.
type propConn struct {
	ws       bool
	tenant   string
	sub      string
	grants   []string
	allowed  []string // subscribed
	denied   []string // refused
	sse      *sseStream
	wsc      *wstest.Client
	expected []string // message ids, in order
}

func (pc *propConn) allows(ch string) bool {
	for _, g := range pc.grants {
		if refMatch(g, pc.sub, ch) {
			return true
		}
	}
	return false
}

func (pc *propConn) String() string {
	kind := "sse"
	if pc.ws {
		kind = "ws"
	}
	return fmt.Sprintf("%s %s/%s grants %q allowed %q denied %q", kind, pc.tenant, pc.sub, pc.grants, pc.allowed, pc.denied)
}

func TestAuthorizationProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(20250301, 5))
	catchUps := 0.0
	for iter := range 30 {
		seed := r.Uint64()
		t.Run(fmt.Sprint(iter), func(t *testing.T) {
			catchUps += propIteration(t, rand.New(rand.NewPCG(seed, 1)))
		})
	}
	if catchUps == 0 {
		t.Fatal("no connection fell behind its queue: the catch-up path was not exercised")
	}
	t.Logf("%v catch-ups from the history", catchUps)
}

// propIteration runs one random case and returns how many times its
// connections caught up from the history.
func propIteration(t *testing.T, r *rand.Rand) float64 {
	cfg := Config{ConnectAttemptsPerIP: -1}
	if r.IntN(2) == 0 {
		// Queues of one or two publications: connections fall behind
		// them, drop them and catch up from the history, and must still
		// receive exactly their publications, once each, in order.
		cfg.QueueMaxMessages = 1 + r.IntN(2)
		// Every publication goes through the queue: a loopback socket
		// takes these few publications whole, so written from the hub's
		// side they would never fill it.
		cfg.queuedOnly = true
	}
	e := newEnv(t, envOptions{cfg: cfg})
	conns := make([]*propConn, 6)
	for i := range conns {
		pc := &propConn{
			ws:     i%2 == 1,
			tenant: propTenants[r.IntN(len(propTenants))],
			sub:    propSubjects[r.IntN(len(propSubjects))],
		}
		for range 1 + r.IntN(3) {
			pc.grants = append(pc.grants, propGrant(r))
		}
		var candidates []string
		for range 2 + r.IntN(4) {
			if ch := propChannel(r); !slices.Contains(candidates, ch) {
				candidates = append(candidates, ch)
			}
		}
		if !slices.ContainsFunc(candidates, pc.allows) {
			pc.grants = append(pc.grants, candidates[0])
		}
		for _, ch := range candidates {
			if pc.allows(ch) {
				pc.allowed = append(pc.allowed, ch)
			} else {
				pc.denied = append(pc.denied, ch)
			}
		}
		propOpen(t, e, pc)
		conns[i] = pc
	}

	// Publications to random keys: half on channels some connection holds,
	// in any tenant (the same name in another tenant is another channel).
	var pubs []fanout.Publication
	publish := func(tenant, channel string) {
		p, err := e.broker.Publish(context.Background(), fanout.Message{
			ID:  fmt.Sprintf("p%d", len(pubs)),
			Key: fanout.Key{Tenant: tenant, Channel: channel}, Type: "prop.test", SchemaVersion: 1,
			Data: json.RawMessage(`null`),
		})
		if err != nil {
			t.Fatal(err)
		}
		pubs = append(pubs, p)
	}
	tenants := append(slices.Clone(propTenants), "t3")
	for range 40 {
		ch := propChannel(r)
		if r.IntN(2) == 0 {
			pc := conns[r.IntN(len(conns))]
			ch = pc.allowed[r.IntN(len(pc.allowed))]
		}
		publish(tenants[r.IntN(len(tenants))], ch)
	}
	// A fence per connection: everything queued before it was written
	// before it.
	for _, pc := range conns {
		publish(pc.tenant, pc.allowed[0])
	}

	// Each connection receives exactly its publications, each once, and
	// each channel's in publication order (channels are not ordered among
	// themselves: a connection catching up reads one channel at a time).
	for _, pc := range conns {
		want := map[string][]string{} // channel → ids
		for _, p := range pubs {
			if p.Key.Tenant == pc.tenant && slices.Contains(pc.allowed, p.Key.Channel) {
				pc.expected = append(pc.expected, p.ID)
				want[p.Key.Channel] = append(want[p.Key.Channel], p.ID)
			}
		}
		got := map[string][]string{}
		var all []string
		for len(all) < len(pc.expected) {
			var id, ch string
			if pc.ws {
				p := pc.wsc.Pub()
				id, ch = p.ID, p.Key.Channel
			} else {
				_, p := pc.sse.publication(t)
				id, ch = p.ID, p.Key.Channel
			}
			all = append(all, id)
			got[ch] = append(got[ch], id)
		}
		for _, ch := range slices.Concat(slices.Collect(maps.Keys(want)), slices.Collect(maps.Keys(got))) {
			if !slices.Equal(got[ch], want[ch]) {
				t.Fatalf("%v\nchannel %s: received %v\nexpected %v\n(all received %v, expected %v)", pc, ch, got[ch], want[ch], all, pc.expected)
			}
		}
	}
	return e.counter(e.srv.metrics.catchUps.WithLabelValues(transportSSE)) + e.counter(e.srv.metrics.catchUps.WithLabelValues(transportWS))
}

// propOpen opens pc's connection, checking that each denied channel is
// refused and each allowed one accepted.
func propOpen(t *testing.T, e *testEnv, pc *propConn) {
	t.Helper()
	tok := e.token(pc.tenant, pc.sub, pc.grants...)
	if pc.ws {
		pc.wsc = e.dialWS(wstest.DialOpts{})
		pc.wsc.Connect(tok)
		for _, ch := range pc.denied {
			pc.wsc.Fails(pc.wsc.Request(ws.OpSubscribe, map[string]any{"channel": ch}), ws.CodeForbidden)
		}
		for _, ch := range pc.allowed {
			pc.wsc.Subscribe(ch, nil)
		}
		return
	}
	for _, ch := range pc.denied {
		e.refused(request{bearer: tok, query: url.Values{"channel": append(slices.Clone(pc.allowed), ch)}}, 403, "forbidden")
	}
	pc.sse = e.open(request{bearer: tok, query: url.Values{"channel": pc.allowed}})
	if ev := pc.sse.next(t, 5*time.Second); ev.Retry == "" {
		t.Fatalf("first block %+v", ev)
	}
	for range pc.allowed {
		pc.sse.subscribed(t)
	}
}

package session

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/subscriptions"
)

// The connection property, extending TestConnFlipsBetweenLiveAndCatchUp:
// a client that subscribes and unsubscribes by request, refreshes its
// token to grants that narrow or widen, and stalls and reads again so its
// connection flips between the live stream and catching up, while
// publications go on and channels change epoch (evicted past the broker's
// MaxChannels, as an idle one starts over past the history TTL), gets per
// channel every publication exactly once and in order, or is told: a
// subscription that starts with recovered: false, a publication of a new
// epoch (from its offset 1), or the connection's end. No subscription is
// made, nor kept, under a token that does not allow it.

// traceEv is one thing the client read.
type traceEv struct {
	kind   string // sub, subfail, unsub, pub, frame, final
	id     uint64
	ch     string
	pos    fanout.Position // pub: its position; sub: the channel's top
	rec    bool            // sub: recovered
	reason string          // subfail, unsub, final: the reason's code; sub: why not recovered
	frame  string          // frame
}

func (e traceEv) String() string {
	short := func(epoch string) string { return epoch[:min(4, len(epoch))] }
	switch e.kind {
	case "pub":
		return fmt.Sprintf("pub %s@%s/%d", e.ch, short(e.pos.Epoch), e.pos.Offset)
	case "sub":
		return fmt.Sprintf("sub#%d %s rec=%v %s top %s/%d", e.id, e.ch, e.rec, e.reason, short(e.pos.Epoch), e.pos.Offset)
	case "frame":
		return e.frame
	}
	return fmt.Sprintf("%s#%d %s %s", e.kind, e.id, e.ch, e.reason)
}

// traceSink is a memSink that also records what the client reads as
// traceEvs.
type traceSink struct {
	*memSink
	trace []traceEv // under memSink.mu
}

func (s *traceSink) add(ev traceEv) error {
	s.mu.Lock()
	s.trace = append(s.trace, ev)
	s.mu.Unlock()
	return nil
}

func (s *traceSink) Subscribed(id uint64, sub Subscription, _ *Positions) error {
	return s.add(traceEv{kind: "sub", id: id, ch: sub.Channel, pos: sub.Top, rec: sub.Recovered, reason: sub.Why.Code})
}
func (s *traceSink) SubscribeFailed(id uint64, ch string, r Reason) error {
	return s.add(traceEv{kind: "subfail", id: id, ch: ch, reason: r.Code})
}
func (s *traceSink) Unsubscribed(id uint64, ch string, r Reason, _ *Positions) error {
	return s.add(traceEv{kind: "unsub", id: id, ch: ch, reason: r.Code})
}
func (s *traceSink) Frame(b []byte) error { return s.add(traceEv{kind: "frame", frame: string(b)}) }
func (s *traceSink) Final(r Reason, _ time.Duration) error {
	return s.add(traceEv{kind: "final", reason: r.Code})
}
func (s *traceSink) Publication(p *fanout.Prepared, pos *Positions) error {
	_ = s.memSink.Publication(p, pos)
	return s.add(traceEv{kind: "pub", ch: p.Key().Channel, pos: p.Position()})
}

func (s *traceSink) read() []traceEv {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.trace)
}

var propChannels = []string{"rooms/a", "rooms/b", "rooms/c", "rooms/d"}

// The runs of TestConnFlipsBetweenLiveAndCatchUpProperty: how many, and
// the seed they are drawn from (each run's own seed names it).
const (
	propRuns = 40
	propSeed = 20260301
)

// propModel drives one connection at random and checks what its client
// read.
type propModel struct {
	t      *testing.T
	r      *rand.Rand
	e      *coreEnv
	c      *Conn
	sink   *traceSink
	grants [][]string // by refresh: the channels each token allows; [0] the first
	since  map[uint64]*fanout.Position
	ids    uint64
	// mu guards what the writer's Done callbacks write: the subscribe
	// requests not yet carried out, and the token (its index in grants)
	// each request was carried out under.
	mu       sync.Mutex
	open     int
	madeWith map[uint64]int
	tokens   map[*auth.Claims]int
	// published holds, per channel and epoch, the last offset published.
	published map[string]map[string]uint64
	stalled   bool
	junk      int
	seen      propSeen
}

// propSeen counts what the runs exercised.
type propSeen struct {
	catchUps, epochChanges, recovered, refusedByWriter, endedByRefresh, unsubscribed int
}

func (a *propSeen) add(b propSeen) {
	a.catchUps += b.catchUps
	a.epochChanges += b.epochChanges
	a.recovered += b.recovered
	a.refusedByWriter += b.refusedByWriter
	a.endedByRefresh += b.endedByRefresh
	a.unsubscribed += b.unsubscribed
}

// claims returns the claims of token i (of grants), the same each time.
func (m *propModel) claims(i int) *auth.Claims {
	m.mu.Lock()
	defer m.mu.Unlock()
	for c, k := range m.tokens {
		if k == i {
			return c
		}
	}
	c := &auth.Claims{Tenant: "acme", Subject: "u1", Subscribe: m.grants[i]}
	m.tokens[c] = i
	return c
}

// authorize decides as a grant-only authorizer does.
func authorize(claims *auth.Claims, ch string) subscriptions.Decision {
	if slices.Contains(claims.Subscribe, ch) {
		return subscriptions.Decision{Allowed: true}
	}
	return subscriptions.Decision{Reason: fmt.Sprintf("no grant for %q", ch)}
}

func (m *propModel) publish(ch string, n int) {
	for range n {
		p := m.e.publish("acme", ch, `1`)
		if m.published[ch] == nil {
			m.published[ch] = map[string]uint64{}
		}
		m.published[ch][p.Epoch] = p.Offset
	}
}

// position returns the position of the last publication of ch the
// client read (or where its subscription began): what a client resumes
// from.
func (m *propModel) position(ch string) (fanout.Position, bool) {
	var pos fanout.Position
	found := false
	for _, ev := range m.sink.read() {
		switch {
		case ev.ch != ch:
		case ev.kind == "pub":
			pos, found = ev.pos, true
		case ev.kind == "sub" && ev.rec:
			pos, found = *m.since[ev.id], true
		case ev.kind == "sub":
			pos, found = ev.pos, true
		}
	}
	return pos, found
}

// ctlRoom reports whether n more control items fit in the control queue
// (its bound closes a connection that does not read its replies).
func (m *propModel) ctlRoom(n int) bool {
	return int(m.c.ctl.n.Load())+n < m.e.env.Bounds.QueueMaxMessages
}

func (m *propModel) step() string {
	ch := propChannels[m.r.IntN(len(propChannels))]
	switch x := m.r.IntN(100); {
	case x < 35:
		n := 1 + m.r.IntN(6)
		if m.stalled {
			n += m.r.IntN(20)
		}
		m.publish(ch, n)
		return fmt.Sprintf("publish %d on %s", n, ch)
	case x < 45:
		if m.stalled {
			m.sink.unstall()
			m.stalled = false
			return "read"
		}
		m.sink.stall()
		m.stalled = true
		return "stall"
	case x < 55:
		// A channel created past MaxChannels evicts the idlest: its next
		// publication or recovery starts a new epoch.
		m.junk++
		m.publish(fmt.Sprintf("junk/%d", m.junk), 1)
		return "evict"
	case x < 72:
		if !m.ctlRoom(1) {
			return "skip"
		}
		switch m.c.Reserve(ch, "") {
		case ReserveTaken:
			return "subscribe " + ch + ": taken"
		case ReserveFull:
			m.t.Fatal("reserve: full")
		}
		cur := m.c.Cur.Load()
		if !authorize(cur, ch).Allowed {
			m.c.Forget(ch)
			return "subscribe " + ch + ": refused at once"
		}
		m.ids++
		var since *fanout.Position
		if p, ok := m.position(ch); ok && m.r.IntN(2) == 0 {
			since = &p
		}
		id := m.ids
		m.since[id] = since
		m.mu.Lock()
		m.open++
		m.mu.Unlock()
		var req *SubscribeReq
		req = &SubscribeReq{
			Since: since, Decision: authorize(cur, ch), Claims: cur,
			Authorize: func(_ context.Context, cl *auth.Claims) (subscriptions.Decision, error) {
				return authorize(cl, ch), nil
			},
			Done: func() {
				m.mu.Lock()
				m.open--
				m.madeWith[id] = m.tokens[req.Claims]
				m.mu.Unlock()
			},
		}
		if !m.c.PushCtl(CtlItem{Kind: CtlSubscribe, ID: m.ids, Channel: ch, Sub: req}) && !m.c.Closed() {
			m.t.Fatal("subscribe: control queue full")
		}
		return fmt.Sprintf("subscribe#%d %s since %v", m.ids, ch, since)
	case x < 85:
		if !m.ctlRoom(1) {
			return "skip"
		}
		m.ids++
		switch m.c.Unsubscribe(m.ids, ch) {
		case Unsubscribed:
			return fmt.Sprintf("unsubscribe#%d %s", m.ids, ch)
		case StillPending:
			return "unsubscribe " + ch + ": pending"
		}
		return "unsubscribe " + ch + ": not subscribed"
	default:
		// A refresh: the new token is current, its result is replied,
		// then every subscription made is re-checked against it (as the
		// WebSocket's refresh does).
		if !m.ctlRoom(1 + len(propChannels)) {
			return "skip"
		}
		var g []string
		for _, c := range propChannels {
			if m.r.IntN(10) < 6 {
				g = append(g, c)
			}
		}
		m.grants = append(m.grants, g)
		n := len(m.grants) - 1
		cl := m.claims(n)
		m.c.Cur.Store(cl)
		m.c.PushCtl(CtlItem{Kind: CtlFrame, Frame: fmt.Appendf(nil, "refresh %d", n)})
		for _, h := range m.c.HeldSubs() {
			m.c.Reauthorized(h.Channel, h.SubToken, nil, authorize(cl, h.Channel), nil)
		}
		return fmt.Sprintf("refresh %d: %v", n, g)
	}
}

// check replays what the client read against the rules; done says the
// connection is quiet and open, so everything must have arrived.
func (m *propModel) check(trace []traceEv, done bool, ops []string) {
	m.mu.Lock()
	madeWith := maps.Clone(m.madeWith)
	m.mu.Unlock()
	fail := func(i int, format string, a ...any) {
		m.t.Helper()
		var b strings.Builder
		for j := max(0, i-40); j <= i && j < len(trace); j++ {
			fmt.Fprintf(&b, "\n  %3d %v", j, trace[j])
		}
		m.t.Fatalf(format+"\ntrace:%s\nsteps: %q", append(a, b.String(), ops)...)
	}
	allows := func(k int, ch string) bool { return slices.Contains(m.grants[k], ch) }
	subscribed := map[string]int{} // the token each subscription was made under
	pos := map[string]fanout.Position{}
	refresh := 0 // the last refresh the client read
	answered := map[uint64]bool{}
	for i, ev := range trace {
		switch ev.kind {
		case "frame":
			if _, err := fmt.Sscanf(ev.frame, "refresh %d", &refresh); err != nil {
				fail(i, "frame %q", ev.frame)
			}
		case "sub":
			if _, ok := subscribed[ev.ch]; ok || answered[ev.id] {
				fail(i, "%s: subscribed twice", ev.ch)
			}
			answered[ev.id] = true
			k, ok := madeWith[ev.id]
			switch {
			case !ok:
				fail(i, "subscribe#%d: made under no token known", ev.id)
			case k < refresh:
				fail(i, "%s made under token %d after refresh %d", ev.ch, k, refresh)
			case !allows(k, ev.ch):
				fail(i, "%s made under token %d, which does not allow it", ev.ch, k)
			}
			since, ok := m.since[ev.id]
			switch {
			case !ok:
				fail(i, "a subscription no one asked for")
			case ev.rec && since == nil:
				fail(i, "recovered without a position")
			case ev.rec:
				pos[ev.ch] = *since
				m.seen.recovered++
			case since == nil && ev.reason != RecoveryNoPosition.Code, since != nil && ev.reason == "":
				fail(i, "not recovered for %q", ev.reason)
			default:
				pos[ev.ch] = ev.pos // told: the client refreshes its state
			}
			subscribed[ev.ch] = k
		case "subfail":
			if answered[ev.id] {
				fail(i, "subscribe#%d answered twice", ev.id)
			}
			answered[ev.id] = true
			if ev.reason != ReasonForbidden.Code {
				fail(i, "subscribe refused for %q", ev.reason)
			}
			m.seen.refusedByWriter++
			if !slices.ContainsFunc(m.grants[refresh:], func(g []string) bool { return !slices.Contains(g, ev.ch) }) {
				fail(i, "%s refused although every token since refresh %d allows it", ev.ch, refresh)
			}
		case "unsub":
			if _, ok := subscribed[ev.ch]; !ok {
				fail(i, "%s: unsubscribed while not subscribed", ev.ch)
			}
			if ev.id == 0 && ev.reason != ReasonForbidden.Code {
				fail(i, "%s ended for %q", ev.ch, ev.reason)
			}
			if ev.id == 0 {
				m.seen.endedByRefresh++
			} else {
				m.seen.unsubscribed++
			}
			delete(subscribed, ev.ch)
		case "pub":
			if _, ok := subscribed[ev.ch]; !ok {
				fail(i, "a publication of %s, not subscribed", ev.ch)
			}
			prev := pos[ev.ch]
			if ev.pos.Epoch == prev.Epoch && ev.pos.Offset != prev.Offset+1 || ev.pos.Epoch != prev.Epoch && ev.pos.Offset != 1 {
				fail(i, "%s: %s/%d after %s/%d: a gap or a repeat", ev.ch, ev.pos.Epoch, ev.pos.Offset, prev.Epoch, prev.Offset)
			}
			if ev.pos.Epoch != prev.Epoch {
				m.seen.epochChanges++
			}
			pos[ev.ch] = ev.pos
		case "final":
			if ev.reason != ReasonSlow.Code && ev.reason != ReasonInsufficientState.Code {
				fail(i, "closed as %s", ev.reason)
			}
			if i != len(trace)-1 {
				fail(i, "events after the final one")
			}
			return
		}
	}
	if !done {
		return
	}
	end := len(trace) - 1
	for id := range m.since {
		if !answered[id] {
			fail(end, "subscribe#%d never answered", id)
		}
	}
	for ch, k := range subscribed {
		// Every refresh after the token it was made under re-checked it.
		for j := k + 1; j < len(m.grants); j++ {
			if !allows(j, ch) {
				fail(end, "%s, made under token %d, outlived refresh %d, which does not allow it", ch, k, j)
			}
		}
		// Everything of the client's epoch arrived; a newer epoch has
		// no publication yet (else it would have arrived, from 1).
		p := pos[ch]
		if got, want := p.Offset, m.published[ch][p.Epoch]; got != want {
			fail(end, "%s: the client is at %s/%d, %d were published in that epoch", ch, p.Epoch, got, want)
		}
		rec, err := m.e.broker.Recover(context.Background(), fanout.Key{Tenant: "acme", Channel: ch}, p, 0)
		if err != nil {
			m.t.Fatal(err)
		}
		if rec.Top.Epoch != p.Epoch && rec.Top.Offset != 0 {
			fail(end, "%s: the client is at %s/%d, the channel at %s/%d", ch, p.Epoch, p.Offset, rec.Top.Epoch, rec.Top.Offset)
		}
	}
}

func TestConnFlipsBetweenLiveAndCatchUpProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(propSeed, 18))
	completed, told := 0, 0
	var seen propSeen
	for range propRuns {
		seed := r.Uint64()
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			quiet, s := connPropIteration(t, seed)
			if quiet {
				completed++
			} else {
				told++
			}
			seen.add(s)
		})
	}
	t.Logf("%d runs ended quiet, %d with the connection closed (told); seen: %+v", completed, told, seen)
	if completed < propRuns/3 {
		t.Fatalf("only %d of %d runs ended quiet: the property was hardly checked", completed, completed+told)
	}
	if seen.catchUps == 0 || seen.epochChanges == 0 || seen.recovered == 0 || seen.refusedByWriter == 0 ||
		seen.endedByRefresh == 0 || seen.unsubscribed == 0 {
		t.Fatalf("a case was not exercised: %+v", seen)
	}
}

// connPropIteration runs one random case; it reports false when the
// connection was closed (told) before the end, and what it exercised.
func connPropIteration(t *testing.T, seed uint64) (bool, propSeen) {
	r := rand.New(rand.NewPCG(seed, 7))
	e := newCoreEnvWith(t, fanout.MemoryConfig{HistorySize: 100000, MaxChannels: len(propChannels) + 1},
		Bounds{QueueMaxMessages: 16, HeartbeatInterval: time.Hour})
	m := &propModel{
		t: t, r: r, e: e, sink: &traceSink{memSink: newMemSink()},
		grants: [][]string{slices.Clone(propChannels)},
		since:  map[uint64]*fanout.Position{}, published: map[string]map[string]uint64{},
		madeWith: map[uint64]int{}, tokens: map[*auth.Claims]int{},
	}
	m.c = newCoreConn(t, e, m.sink.memSink)
	m.c.Out = m.sink
	m.c.Claims = m.claims(0)
	m.c.Cur.Store(m.c.Claims)
	m.c.StartWriting()
	var ops []string
	for range 300 {
		ops = append(ops, m.step())
		if m.c.Closed() {
			break
		}
	}
	m.sink.unstall()
	m.stalled = false
	quiet := func() bool { return m.c.Closed() || !m.c.writing.Load() && !m.c.pending() }
	eventually(t, time.Minute, "the connection to be quiet", quiet)
	if m.c.Closed() {
		<-m.c.FinalDone
		t.Logf("closed as %s (%s) after %d steps", m.c.Reason().Code, m.c.Reason().Message, len(ops))
		m.check(m.sink.read(), false, ops)
		m.seen.catchUps = int(e.counter(e.env.Counters.CatchUps.WithLabelValues("sse")))
		return false, m.seen
	}
	m.mu.Lock()
	open := m.open
	m.mu.Unlock()
	if open != 0 {
		t.Fatalf("%d subscribe requests not carried out", open)
	}
	m.check(m.sink.read(), true, ops)
	m.seen.catchUps = int(e.counter(e.env.Counters.CatchUps.WithLabelValues("sse")))
	return true, m.seen
}

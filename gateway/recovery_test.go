package gateway

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/sse"
	"github.com/heraldgw/herald/gateway/internal/ws"
)

// recoveryCase is a channel with history and the position a client
// resumes it from, and the reason its subscription must give.
type recoveryCase struct {
	channel string
	since   func(top fanout.Position) *fanout.Position
	want    session.RecoveryReason
}

// recoveryCases publishes on each case's channel (history 3, five
// publications) and returns the cases, one per reason and one that
// recovers (want.Code "").
func recoveryCases(e *testEnv) []recoveryCase {
	cases := []recoveryCase{
		{"orders/live", func(fanout.Position) *fanout.Position { return nil }, session.RecoveryNoPosition},
		{"orders/epoch", func(top fanout.Position) *fanout.Position {
			return &fanout.Position{Offset: 1, Epoch: top.Epoch + "x"}
		}, session.RecoveryEpochChanged},
		{"orders/old", func(top fanout.Position) *fanout.Position {
			return &fanout.Position{Offset: 1, Epoch: top.Epoch}
		}, session.RecoveryHistoryExceeded},
		{"orders/ahead", func(top fanout.Position) *fanout.Position {
			return &fanout.Position{Offset: top.Offset + 1, Epoch: top.Epoch}
		}, session.RecoveryPositionAhead},
		{"orders/ok", func(top fanout.Position) *fanout.Position {
			return &fanout.Position{Offset: top.Offset - 1, Epoch: top.Epoch}
		}, session.RecoveryReason{}},
	}
	if len(cases) != len(session.RecoveryReasons)+1 {
		e.t.Fatalf("%d cases for %d recovery reasons", len(cases), len(session.RecoveryReasons))
	}
	return cases
}

// publishCases publishes five times on every case's channel and returns their
// positions.
func publishCases(e *testEnv, cases []recoveryCase) map[string]fanout.Position {
	tops := map[string]fanout.Position{}
	for _, c := range cases {
		for range 5 {
			p := e.publish("acme", c.channel, `1`)
			tops[c.channel] = fanout.Position{Offset: p.Offset, Epoch: p.Epoch}
		}
	}
	return tops
}

// TestWSRecoveryReasons: every subscribe result with recovered:false says
// why in reason, one case per reason; a recovered one carries none.
func TestWSRecoveryReasons(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{history: 3})
	cases := recoveryCases(e)
	tops := publishCases(e, cases)
	c := e.connected("orders/*")
	for _, rc := range cases {
		fields := map[string]any{"channel": rc.channel}
		if since := rc.since(tops[rc.channel]); since != nil {
			fields["since"] = ws.Position{Offset: since.Offset, Epoch: since.Epoch}
		}
		f := c.Reply(c.Request(ws.OpSubscribe, fields))
		var res ws.SubscribeResult
		if f.Error != nil || json.Unmarshal(f.Result, &res) != nil {
			t.Fatalf("%s: %s", rc.channel, f.Raw)
		}
		if res.Recovered != (rc.want.Code == "") || res.Reason != rc.want.Code ||
			(rc.want.Code == "") == strings.Contains(f.Raw, `"reason"`) {
			t.Fatalf("%s: %s, want reason %q", rc.channel, f.Raw, rc.want.Code)
		}
		if res.Recovered {
			if p := c.Pub(); p.Offset != tops[rc.channel].Offset {
				t.Fatalf("%s: recovered %+v", rc.channel, p)
			}
		}
	}
}

// TestSSERecoveryReasons: the same for the subscribed events of one
// stream, whose cursor covers every channel but the live one.
func TestSSERecoveryReasons(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{history: 3})
	cases := recoveryCases(e)
	tops := publishCases(e, cases)
	pos := session.NewPositions("acme", len(cases))
	query := url.Values{}
	for _, rc := range cases {
		query.Add("channel", rc.channel)
		if since := rc.since(tops[rc.channel]); since != nil {
			pos.Add(rc.channel, *since)
		}
	}
	var enc sse.CursorEncoder
	s := e.open(request{bearer: e.token("acme", "u1", "orders/*"), query: query, lastID: string(enc.Encode(pos.Entries))})
	s.next(t, 5*time.Second) // retry
	for _, rc := range cases {
		ev, sub := s.subscribed(t)
		if sub.Channel != rc.channel || sub.Recovered != (rc.want.Code == "") || sub.Reason != rc.want.Code ||
			(rc.want.Code == "") == strings.Contains(ev.Data, `"reason"`) {
			t.Fatalf("subscribed %s, want %s with reason %q", ev.Data, rc.channel, rc.want.Code)
		}
	}
}

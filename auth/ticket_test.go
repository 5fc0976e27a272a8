package auth

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/redis/go-redis/v9"
)

func newTestRedis(t *testing.T) (redis.UniversalClient, string) {
	t.Helper()
	url, prefix := testenv.Redis(t)
	opt, err := redis.ParseURL(url)
	testenv.Must(t, err, "redis url")
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb, prefix
}

// ticketIssuers gives each implementation with two handles ("nodes")
// sharing one backing store where the implementation allows it.
func ticketIssuers() map[string]func(t *testing.T, cfg TicketConfig) (TicketIssuer, TicketIssuer) {
	return map[string]func(t *testing.T, cfg TicketConfig) (TicketIssuer, TicketIssuer){
		"memory": func(t *testing.T, cfg TicketConfig) (TicketIssuer, TicketIssuer) {
			s, err := NewMemoryTickets(cfg)
			testenv.Must(t, err, "memory tickets")
			return s, s
		},
		"redis": func(t *testing.T, cfg TicketConfig) (TicketIssuer, TicketIssuer) {
			rdb, prefix := newTestRedis(t)
			cfg.Prefix = prefix
			a, err := NewRedisTickets(rdb, cfg)
			testenv.Must(t, err, "redis tickets")
			rdb2, _ := newTestRedis(t)
			b, err := NewRedisTickets(rdb2, cfg)
			testenv.Must(t, err, "redis tickets, second node")
			return a, b
		},
	}
}

// eachTicketStore runs test as a subtest of t on each ticket store of
// ticketIssuers, which open opens with a config.
func eachTicketStore(t *testing.T, test func(t *testing.T, open func(TicketConfig) (TicketIssuer, TicketIssuer))) {
	for name, open := range ticketIssuers() {
		t.Run(name, func(t *testing.T) {
			test(t, func(cfg TicketConfig) (TicketIssuer, TicketIssuer) { return open(t, cfg) })
		})
	}
}

func TestTicketsSingleUse(t *testing.T) {
	ctx := context.Background()
	eachTicketStore(t, func(t *testing.T, open func(TicketConfig) (TicketIssuer, TicketIssuer)) {
		issuer, redeemer := open(TicketConfig{})
		c := baseClaims("alice", "acme")
		c.ExpiresAt = time.Now().Add(time.Hour).Truncate(time.Millisecond)
		c.IssuedAt = time.Now().Truncate(time.Millisecond)
		ticket := mustIssue(t, issuer, &c)
		if len(ticket) != ticketLen {
			t.Fatalf("ticket %q: want %d characters", ticket, ticketLen)
		}
		c.Subscribe[0] = "changed-after-issue"
		got, err := redeemer.Redeem(ctx, ticket)
		if err != nil {
			t.Fatalf("redeem: %v", err)
		}
		if got.Subject != "alice" || got.Tenant != "acme" || got.SessionID != "sess-1" || got.TokenID != "tok-1" ||
			!slices.Equal(got.Subscribe, []string{"orders/*", "users/{sub}/**"}) ||
			!got.ExpiresAt.Equal(c.ExpiresAt) || !got.IssuedAt.Equal(c.IssuedAt) {
			t.Fatalf("redeemed claims differ: %+v", got)
		}
		_, err = redeemer.Redeem(ctx, ticket)
		if !errors.Is(err, ErrInvalidTicket) || !errors.Is(err, ErrTicketUsed) {
			t.Fatalf("second redeem: want ErrTicketUsed, got %v", err)
		}
		other, _, _ := newTicket()
		for _, bad := range []string{other, "", "short", ticket + "x", ticket[:ticketLen-1] + "="} {
			if _, err := redeemer.Redeem(ctx, bad); !errors.Is(err, ErrTicketUnknown) {
				t.Fatalf("redeem %q: want ErrTicketUnknown, got %v", bad, err)
			}
		}
	})
}

func TestTicketsConcurrentRedeemOnce(t *testing.T) {
	ctx := context.Background()
	eachTicketStore(t, func(t *testing.T, open func(TicketConfig) (TicketIssuer, TicketIssuer)) {
		issuer, redeemer := open(TicketConfig{})
		c := baseClaims("alice", "acme")
		ticket := mustIssue(t, issuer, &c)
		var wins atomic.Int32
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				if _, err := redeemer.Redeem(ctx, ticket); err == nil {
					wins.Add(1)
				} else if !errors.Is(err, ErrTicketUsed) {
					t.Errorf("loser: want ErrTicketUsed, got %v", err)
				}
			})
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("%d redemptions succeeded, want exactly 1", wins.Load())
		}
	})
}

func TestTicketsRefuseBadClaims(t *testing.T) {
	ctx := context.Background()
	eachTicketStore(t, func(t *testing.T, open func(TicketConfig) (TicketIssuer, TicketIssuer)) {
		issuer, _ := open(TicketConfig{})
		expired := baseClaims("alice", "acme")
		expired.ExpiresAt = time.Now().Add(-time.Second)
		if _, err := issuer.Issue(ctx, &expired); !errors.Is(err, ErrExpired) {
			t.Fatalf("expired claims: want ErrExpired, got %v", err)
		}
		sub := baseClaims("alice", "acme")
		sub.Channel = "orders/1"
		if _, err := issuer.Issue(ctx, &sub); err == nil {
			t.Fatal("subscription-token claims must not buy a ticket")
		}
		if _, err := issuer.Issue(ctx, nil); err == nil {
			t.Fatal("nil claims must be refused")
		}
	})
}

func TestMemoryTicketsExpiryAndBound(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	s, err := NewMemoryTickets(TicketConfig{TTL: 10 * time.Second, MaxTickets: 3, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	c := baseClaims("alice", "acme")
	c.ExpiresAt = clock.Now().Add(time.Hour)
	var tickets []string
	for range 3 {
		tk := mustIssue(t, s, &c)
		tickets = append(tickets, tk)
	}
	if _, err := s.Issue(ctx, &c); !errors.Is(err, ErrTicketsFull) {
		t.Fatalf("fourth ticket: want ErrTicketsFull, got %v", err)
	}
	clock.Advance(9 * time.Second)
	if _, err := s.Redeem(ctx, tickets[0]); err != nil {
		t.Fatalf("redeem within TTL: %v", err)
	}
	clock.Advance(time.Second)
	if _, err := s.Redeem(ctx, tickets[1]); !errors.Is(err, ErrTicketUnknown) {
		t.Fatalf("redeem at TTL: want ErrTicketUnknown, got %v", err)
	}
	if s.Len() != 0 {
		t.Fatalf("expired tickets not swept: %d held", s.Len())
	}
	if _, err := s.Issue(ctx, &c); err != nil {
		t.Fatalf("issue after sweep: %v", err)
	}

	// A ticket never outlives the token behind it.
	short := baseClaims("alice", "acme")
	short.ExpiresAt = clock.Now().Add(2 * time.Second)
	tk := mustIssue(t, s, &short)
	clock.Advance(2 * time.Second)
	if _, err := s.Redeem(ctx, tk); !errors.Is(err, ErrTicketUnknown) {
		t.Fatalf("ticket past its token's exp: want ErrTicketUnknown, got %v", err)
	}

	for _, bad := range []TicketConfig{{TTL: time.Hour}, {MaxTickets: -1}} {
		if _, err := NewMemoryTickets(bad); err == nil {
			t.Fatalf("config %+v must be refused", bad)
		}
	}
}

func TestRedisTicketsExpire(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := newTestRedis(t)
	s, err := NewRedisTickets(rdb, TicketConfig{TTL: 100 * time.Millisecond, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	c := baseClaims("alice", "acme")
	tk := mustIssue(t, s, &c)
	key, _ := ticketKey(tk)
	if ttl := rdb.PTTL(ctx, prefix+"ticket:"+key).Val(); ttl <= 0 || ttl > 100*time.Millisecond {
		t.Fatalf("ticket key TTL %s, want (0, 100ms]", ttl)
	}
	testenv.Eventually(t, 5*time.Second, "ticket key expires in Redis", func() bool {
		return rdb.Exists(ctx, prefix+"ticket:"+key).Val() == 0
	})
	if _, err := s.Redeem(ctx, tk); !errors.Is(err, ErrTicketUnknown) {
		t.Fatalf("expired ticket: want ErrTicketUnknown, got %v", err)
	}
	// The used marker keeps the ticket's expiry.
	tk2, _ := s.Issue(ctx, &c)
	if _, err := s.Redeem(ctx, tk2); err != nil {
		t.Fatal(err)
	}
	key2, _ := ticketKey(tk2)
	if ttl := rdb.PTTL(ctx, prefix+"ticket:"+key2).Val(); ttl <= 0 {
		t.Fatalf("used marker has no expiry (PTTL %s)", ttl)
	}
}

// TestTicketsBoundPerUser: one user (tenant and subject) holds at most
// MaxPerUser live tickets, in either store and across the nodes sharing
// it; other users, including the same subject in another tenant, are
// unaffected; a redeemed or expired ticket gives its place back.
func TestTicketsBoundPerUser(t *testing.T) {
	ctx := context.Background()
	const limit = 5
	eachTicketStore(t, func(t *testing.T, open func(TicketConfig) (TicketIssuer, TicketIssuer)) {
		clock := newFakeClock()
		a, b := open(TicketConfig{MaxPerUser: limit, Now: clock.Now})
		alice := baseClaims("alice", "acme")
		var tickets []string
		for i := range limit {
			node := a
			if i%2 == 1 {
				node = b
			}
			tk, err := node.Issue(ctx, &alice)
			if err != nil {
				t.Fatalf("ticket %d: %v", i+1, err)
			}
			tickets = append(tickets, tk)
		}
		for _, node := range []TicketIssuer{a, b} {
			_, err := node.Issue(ctx, &alice)
			if !errors.Is(err, ErrTooManyTickets) || !strings.Contains(err.Error(), "MaxPerUser") {
				t.Fatalf("ticket %d: want ErrTooManyTickets naming MaxPerUser, got %v", limit+1, err)
			}
		}
		for _, other := range []Claims{baseClaims("bob", "acme"), baseClaims("alice", "globex")} {
			if _, err := a.Issue(ctx, &other); err != nil {
				t.Fatalf("%s@%s refused while alice@acme is at her bound: %v", other.Subject, other.Tenant, err)
			}
		}
		if _, err := b.Redeem(ctx, tickets[0]); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Issue(ctx, &alice); err != nil {
			t.Fatalf("after a redemption: %v", err)
		}
		if _, err := a.Issue(ctx, &alice); !errors.Is(err, ErrTooManyTickets) {
			t.Fatalf("at the bound again: %v", err)
		}
		clock.Advance(DefaultTicketTTL)
		for i := range limit {
			if _, err := b.Issue(ctx, &alice); err != nil {
				t.Fatalf("ticket %d after the others expired: %v", i+1, err)
			}
		}
	})
	if _, err := NewMemoryTickets(TicketConfig{MaxPerUser: -1}); err == nil {
		t.Fatal("MaxPerUser -1 must be refused")
	}
}

// TestRedisTicketsAreSmall: a ticket for a token with large grant lists
// stores its claims without them; the lists are kept once for every
// ticket that shares them, and redemption on another node gives them back
// whole.
func TestRedisTicketsAreSmall(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := newTestRedis(t)
	s, err := NewRedisTickets(rdb, TicketConfig{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	rdb2, _ := newTestRedis(t)
	other, err := NewRedisTickets(rdb2, TicketConfig{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	c := baseClaims("alice", "acme")
	c.Subscribe = nil
	for i := range 200 { // about 12 KB of grants, as a 16 KiB token may carry
		c.Subscribe = append(c.Subscribe, fmt.Sprintf("tenants/acme/projects/project-%04d/documents/**", i))
	}
	c.Publish = []string{"rooms/lobby"}
	var tickets []string
	for range 20 {
		tk := mustIssue(t, s, &c)
		tickets = append(tickets, tk)
	}
	key, _ := ticketKey(tickets[0])
	if n := len(rdb.Get(ctx, prefix+"ticket:"+key).Val()); n == 0 || n > 512 {
		t.Fatalf("a ticket stores %d bytes, want at most 512 (the grants apart)", n)
	}
	grants := rdb.Keys(ctx, prefix+"ticketgrants:*").Val()
	if len(grants) != 1 {
		t.Fatalf("%d stored grant lists for 20 tickets of one token, want 1", len(grants))
	}
	for _, tk := range tickets {
		got, err := other.Redeem(ctx, tk)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Subscribe, c.Subscribe) || !slices.Equal(got.Publish, c.Publish) {
			t.Fatalf("redeemed grants differ: %d subscribe, %v publish", len(got.Subscribe), got.Publish)
		}
	}
	// A ticket whose grant lists are gone (Redis lost them) is refused,
	// never honoured without its grants.
	tk := mustIssue(t, s, &c)
	rdb.Del(ctx, grants[0])
	if _, err := other.Redeem(ctx, tk); !errors.Is(err, ErrTicketUnknown) {
		t.Fatalf("ticket without its grants: want ErrTicketUnknown, got %v", err)
	}
}

// mustIssue issues a ticket for c on s, failing t on an error.
func mustIssue(t *testing.T, s TicketIssuer, c *Claims) string {
	t.Helper()
	tk, err := s.Issue(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisTickets is a TicketIssuer in Redis, so a ticket issued on one node
// can be redeemed on any other. Each ticket is one small key
// <prefix>ticket:<sha256 of the ticket> expiring with the ticket, holding
// the claims without their grant lists; a redeemed ticket's value is
// replaced by a marker until it expires, so a replay is told apart from an
// unknown ticket. The grant lists are kept once per distinct set, under
// <prefix>ticketgrants:<sha256 of the lists>, and live one TTL after the
// last ticket issued with them, so a user's many tickets share one copy.
// Each user's live tickets are counted in a sorted set
// <prefix>ticketuser:<sha256 of tenant and subject>, scored by expiry,
// which bounds them (TicketConfig.MaxPerUser). Every command touches one
// key, so it works on Redis Cluster.
type RedisTickets struct {
	rdb    redis.UniversalClient
	cfg    TicketConfig
	prefix string
}

// NewRedisTickets validates cfg and returns a store on rdb; the caller owns
// rdb.
func NewRedisTickets(rdb redis.UniversalClient, cfg TicketConfig) (*RedisTickets, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &RedisTickets{rdb: rdb, cfg: cfg, prefix: cfg.Prefix}, nil
}

// redisUsedMarker replaces a redeemed ticket's claims; JSON claims always
// start with "{", so it cannot collide.
const redisUsedMarker = "used"

// redisRedeemScript atomically reads KEYS[1] and, when it holds claims,
// replaces them with the used marker keeping the expiry (GETDEL with a
// tombstone). It returns the claims, the marker, or nil.
var redisRedeemScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then return false end
if v ~= 'used' then redis.call('SET', KEYS[1], 'used', 'KEEPTTL') end
return v
`)

// redisReserveScript counts a new ticket against its user's bound: it drops
// the members of the sorted set KEYS[1] that expired by ARGV[1] (now, ms),
// and unless ARGV[2] (the bound) remain, adds member ARGV[3] scored by its
// expiry ARGV[4] and keeps the set ARGV[5] ms (one TTL, longer than any
// member). It returns 1 when the ticket was counted, 0 at the bound.
var redisReserveScript = redis.NewScript(`
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[4], ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
`)

// redisTicketGrants is the stored JSON shape of a ticket's grant lists.
type redisTicketGrants struct {
	Subscribe []string `json:"subscribe,omitempty"`
	Publish   []string `json:"publish,omitempty"`
}

// Issue returns a new ticket bound to c.
func (s *RedisTickets) Issue(ctx context.Context, c *Claims) (string, error) {
	now := s.cfg.Now()
	ttl, err := ticketLifetime(c, s.cfg.TTL, now)
	if err != nil {
		return "", err
	}
	tc := newTicketClaims(c)
	tc.Subscribe, tc.Publish = nil, nil
	var grants []byte
	if len(c.Subscribe) > 0 || len(c.Publish) > 0 {
		if grants, err = json.Marshal(redisTicketGrants{Subscribe: c.Subscribe, Publish: c.Publish}); err != nil {
			return "", fmt.Errorf("auth: issue ticket: %w", err)
		}
		sum := sha256.Sum256(grants)
		tc.Grants = hex.EncodeToString(sum[:])
	}
	body, err := json.Marshal(tc)
	if err != nil {
		return "", fmt.Errorf("auth: issue ticket: %w", err)
	}
	ticket, key, err := newTicket()
	if err != nil {
		return "", err
	}
	user := s.userKey(c.Tenant, c.Subject)
	counted, err := redisReserveScript.Run(ctx, s.rdb, []string{user},
		now.UnixMilli(), s.cfg.MaxPerUser, key, now.Add(ttl).UnixMilli(), s.cfg.TTL.Milliseconds()).Int()
	if err != nil {
		return "", fmt.Errorf("auth: issue ticket: %w", err)
	}
	if counted == 0 {
		return "", tooManyTickets(s.cfg.MaxPerUser)
	}
	ok, err := s.store(ctx, key, body, tc.Grants, grants, ttl)
	if err != nil || !ok {
		// Give the count back; at worst it lapses with the ticket's expiry.
		_ = s.rdb.ZRem(context.WithoutCancel(ctx), user, key).Err()
	}
	switch {
	case err != nil:
		return "", fmt.Errorf("auth: issue ticket: %w", err)
	case !ok:
		return "", fmt.Errorf("auth: issue ticket: random ticket collided")
	}
	return ticket, nil
}

// store writes the grant lists (renewing them for one TTL) and then the
// ticket, unless the ticket's key exists.
func (s *RedisTickets) store(ctx context.Context, key string, body []byte, grantsID string, grants []byte, ttl time.Duration) (bool, error) {
	if grantsID != "" {
		if err := s.rdb.Set(ctx, s.prefix+"ticketgrants:"+grantsID, grants, s.cfg.TTL).Err(); err != nil {
			return false, err
		}
	}
	return s.rdb.SetNX(ctx, s.prefix+"ticket:"+key, body, ttl).Result()
}

// Redeem returns the claims bound to ticket and uses it up.
func (s *RedisTickets) Redeem(ctx context.Context, ticket string) (*Claims, error) {
	key, err := ticketKey(ticket)
	if err != nil {
		return nil, err
	}
	v, err := redisRedeemScript.Run(ctx, s.rdb, []string{s.prefix + "ticket:" + key}).Text()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, fmt.Errorf("auth: redeem ticket: %w: %w", ErrInvalidTicket, ErrTicketUnknown)
	case err != nil:
		return nil, fmt.Errorf("auth: redeem ticket: %w", err)
	case v == redisUsedMarker:
		return nil, fmt.Errorf("auth: redeem ticket: %w: %w", ErrInvalidTicket, ErrTicketUsed)
	}
	var tc ticketClaims
	if err := json.Unmarshal([]byte(v), &tc); err != nil {
		return nil, fmt.Errorf("auth: redeem ticket: stored claims do not decode: %w", err)
	}
	c := tc.claims()
	// The ticket is used up: it no longer counts against its user.
	_ = s.rdb.ZRem(ctx, s.userKey(c.Tenant, c.Subject), key).Err()
	if tc.Grants != "" {
		raw, err := s.rdb.Get(ctx, s.prefix+"ticketgrants:"+tc.Grants).Bytes()
		switch {
		case errors.Is(err, redis.Nil):
			// Lost (evicted, or Redis lost its data): the ticket cannot
			// be honoured; a fresh one can.
			return nil, fmt.Errorf("auth: redeem ticket: %w: %w (its grants are gone)", ErrInvalidTicket, ErrTicketUnknown)
		case err != nil:
			return nil, fmt.Errorf("auth: redeem ticket: %w", err)
		}
		var g redisTicketGrants
		if err := json.Unmarshal(raw, &g); err != nil {
			return nil, fmt.Errorf("auth: redeem ticket: stored grants do not decode: %w", err)
		}
		c.Subscribe, c.Publish = g.Subscribe, g.Publish
	}
	return c, nil
}

// userKey is the sorted set counting the live tickets of tenant's subject.
func (s *RedisTickets) userKey(tenant, subject string) string {
	return s.prefix + "ticketuser:" + ticketUser(&Claims{Tenant: tenant, Subject: subject})
}

// TTL is the longest a ticket issued by s lives.
func (s *RedisTickets) TTL() time.Duration { return s.cfg.TTL }

// MaxPerUser is the most live tickets one user may hold.
func (s *RedisTickets) MaxPerUser() int { return s.cfg.MaxPerUser }

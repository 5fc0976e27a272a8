package auth

import (
	"time"

	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// RedisTickets is a TicketIssuer in Redis, so a ticket issued on one node
// can be redeemed on any other. Each ticket is one key
// <prefix>ticket:<sha256 of the ticket> expiring with the ticket; a
// redeemed ticket's value is replaced by a marker until it expires, so a
// replay is told apart from an unknown ticket.
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
	return &RedisTickets{rdb: rdb, cfg: cfg, prefix: cfg.Prefix + "ticket:"}, nil
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

// Issue returns a new ticket bound to c.
func (s *RedisTickets) Issue(ctx context.Context, c *Claims) (string, error) {
	ttl, err := ticketLifetime(c, s.cfg.TTL, s.cfg.Now())
	if err != nil {
		return "", err
	}
	body, err := encodeTicketClaims(c)
	if err != nil {
		return "", err
	}
	ticket, err := newTicket()
	if err != nil {
		return "", err
	}
	key, err := ticketKey(ticket)
	if err != nil {
		return "", err
	}
	ok, err := s.rdb.SetNX(ctx, s.prefix+key, body, ttl).Result()
	if err != nil {
		return "", fmt.Errorf("auth: issue ticket: %w", err)
	}
	if !ok {
		return "", fmt.Errorf("auth: issue ticket: random ticket collided")
	}
	return ticket, nil
}

// Redeem returns the claims bound to ticket and uses it up.
func (s *RedisTickets) Redeem(ctx context.Context, ticket string) (*Claims, error) {
	key, err := ticketKey(ticket)
	if err != nil {
		return nil, err
	}
	v, err := redisRedeemScript.Run(ctx, s.rdb, []string{s.prefix + key}).Text()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, fmt.Errorf("auth: redeem ticket: %w: %w", ErrInvalidTicket, ErrTicketUnknown)
	case err != nil:
		return nil, fmt.Errorf("auth: redeem ticket: %w", err)
	case v == redisUsedMarker:
		return nil, fmt.Errorf("auth: redeem ticket: %w: %w", ErrInvalidTicket, ErrTicketUsed)
	}
	return decodeTicketClaims([]byte(v))
}

// TTL is the longest a ticket issued by s lives.
func (s *RedisTickets) TTL() time.Duration { return s.cfg.TTL }

package auth

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultRedisPrefix prefixes every Redis key auth writes when no prefix is
// given.
const DefaultRedisPrefix = "herald:"

// RedisRevocations is a RevocationStore in Redis: a sorted set
// <prefix>{revocations} of "sid:<id>" / "jti:<id>" members scored by Until
// (Unix ms), and a hash <prefix>{revocations}:meta holding each member's
// creation time and reason. Both keys share a hash tag, so it works on
// Redis Cluster. Requires Redis 6.2 or later.
type RedisRevocations struct {
	rdb  redis.UniversalClient
	set  string
	meta string
	now  func() time.Time
}

// NewRedisRevocations returns a store on rdb under prefix ("" means
// DefaultRedisPrefix); the caller owns rdb.
func NewRedisRevocations(rdb redis.UniversalClient, prefix string) *RedisRevocations {
	if prefix == "" {
		prefix = DefaultRedisPrefix
	}
	return &RedisRevocations{
		rdb:  rdb,
		set:  prefix + "{revocations}",
		meta: prefix + "{revocations}:meta",
		now:  time.Now,
	}
}

// redisPruneLua deletes members scored at or below ARGV[1] from the set
// KEYS[1] and the hash KEYS[2], in chunks, and returns how many.
const redisPruneLua = `
local n = 0
while true do
	local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 500)
	if #old == 0 then break end
	redis.call('ZREM', KEYS[1], unpack(old))
	redis.call('HDEL', KEYS[2], unpack(old))
	n = n + #old
end
return n
`

var redisPruneScript = redis.NewScript(redisPruneLua)

// redisRevokeScript prunes members at or below ARGV[1] (now, ms), then
// records member ARGV[2] with score max(current, ARGV[3]) and meta
// "<created ms>\n<reason ARGV[4]>", keeping the first creation time.
var redisRevokeScript = redis.NewScript(redisPruneLua[:strings.LastIndex(redisPruneLua, "return n")] + `
local cur = redis.call('ZSCORE', KEYS[1], ARGV[2])
if (not cur) or tonumber(cur) < tonumber(ARGV[3]) then
	redis.call('ZADD', KEYS[1], ARGV[3], ARGV[2])
end
local created = ARGV[1]
local m = redis.call('HGET', KEYS[2], ARGV[2])
if m then
	created = string.match(m, '^(%d+)\n') or created
end
redis.call('HSET', KEYS[2], ARGV[2], created .. '\n' .. ARGV[4])
return 1
`)

// Revoke records r, pruning expired members in the same script.
func (s *RedisRevocations) Revoke(ctx context.Context, r Revocation) error {
	kind, id, err := r.key()
	if err != nil {
		return wrapRevoke(err)
	}
	now := s.now().UnixMilli()
	err = redisRevokeScript.Run(ctx, s.rdb, []string{s.set, s.meta},
		now, kind+":"+id, r.Until.UnixMilli(), r.Reason).Err()
	if err != nil {
		return wrapRevoke(err)
	}
	return nil
}

// IsRevoked reports whether c's sid or jti is revoked now.
func (s *RedisRevocations) IsRevoked(ctx context.Context, c *Claims) (bool, error) {
	sid, jti := claimIDs(c)
	var members []string
	if sid != "" {
		members = append(members, kindSession+":"+sid)
	}
	if jti != "" {
		members = append(members, kindToken+":"+jti)
	}
	if len(members) == 0 {
		return false, nil
	}
	scores, err := s.rdb.ZMScore(ctx, s.set, members...).Result()
	if err != nil {
		return false, fmt.Errorf("auth: is revoked: %w", err)
	}
	now := float64(s.now().UnixMilli())
	for _, sc := range scores {
		if sc > now {
			return true, nil
		}
	}
	return false, nil
}

// List returns the live revocations by creation time then id.
func (s *RedisRevocations) List(ctx context.Context) ([]Revocation, error) {
	zs, err := s.live(ctx)
	if err != nil {
		return nil, fmt.Errorf("auth: list revocations: %w", err)
	}
	if len(zs) == 0 {
		return nil, nil
	}
	members := make([]string, len(zs))
	for i, z := range zs {
		members[i], _ = z.Member.(string)
	}
	metas, err := s.rdb.HMGet(ctx, s.meta, members...).Result()
	if err != nil {
		return nil, fmt.Errorf("auth: list revocations: %w", err)
	}
	out := make([]Revocation, 0, len(zs))
	for i, z := range zs {
		kind, id, ok := strings.Cut(members[i], ":")
		if !ok {
			continue
		}
		var created time.Time
		var reason string
		if m, ok := metas[i].(string); ok {
			ms, rest, _ := strings.Cut(m, "\n")
			if v, err := strconv.ParseInt(ms, 10, 64); err == nil {
				created = time.UnixMilli(v)
			}
			reason = rest
		}
		out = append(out, revocationOf(kind, id, time.UnixMilli(int64(z.Score)), reason, created))
	}
	sortRevocations(out)
	return out, nil
}

// Snapshot returns the live revocations in one command.
func (s *RedisRevocations) Snapshot(ctx context.Context) (*RevocationSet, error) {
	zs, err := s.live(ctx)
	if err != nil {
		return nil, fmt.Errorf("auth: revocation snapshot: %w", err)
	}
	set := newRevocationSet()
	for _, z := range zs {
		m, _ := z.Member.(string)
		if kind, id, ok := strings.Cut(m, ":"); ok {
			set.add(kind, id, time.UnixMilli(int64(z.Score)))
		}
	}
	return set, nil
}

func (s *RedisRevocations) live(ctx context.Context) ([]redis.Z, error) {
	return s.rdb.ZRangeByScoreWithScores(ctx, s.set, &redis.ZRangeBy{
		Min: "(" + strconv.FormatInt(s.now().UnixMilli(), 10),
		Max: "+inf",
	}).Result()
}

// Prune deletes revocations whose Until has passed.
func (s *RedisRevocations) Prune(ctx context.Context) (int, error) {
	n, err := redisPruneScript.Run(ctx, s.rdb, []string{s.set, s.meta}, s.now().UnixMilli()).Int()
	if err != nil {
		return 0, fmt.Errorf("auth: prune revocations: %w", err)
	}
	return n, nil
}

package fanout

import "github.com/redis/go-redis/v9"

// Every channel has two keys in one Redis Cluster hash slot, named by the
// hash tag {tenant/channel}:
//
//	<prefix>{tenant/channel}:meta    hash: epoch, top (last offset)
//	<prefix>{tenant/channel}:stream  stream: entry id "<offset>-0", field e = envelope
//
// and one pub/sub channel, <prefix>{tenant/channel}:pub, in the same slot
// (which sharded pub/sub requires), carrying "<tenant>\n<envelope>".
//
// The epoch starts over (new random epoch, offset 0, stream deleted) when
// the meta hash is missing, or when it records publications but the stream
// is gone: either way the history was lost (expiry, FLUSHDB, eviction).

// publishScript assigns the next offset, appends the envelope to the stream
// trimmed to the history size, refreshes both keys' expiry and publishes
// the envelope, all in one atomic step, so history and fan-out cannot
// diverge. The envelope is spliced from a head ending in "offset":, the
// offset, the epoch (hex, needs no escaping) and a tail starting at "type".
//
// KEYS: meta, stream. ARGV: candidate epoch, envelope head, envelope tail,
// history size, TTL in ms, pub/sub channel, tenant, PUBLISH or SPUBLISH.
// Returns {offset, epoch}.
var publishScript = redis.NewScript(`
local meta, stream = KEYS[1], KEYS[2]
local epoch = redis.call('HGET', meta, 'epoch')
local top = tonumber(redis.call('HGET', meta, 'top') or '0')
if (not epoch) or (top > 0 and redis.call('EXISTS', stream) == 0) then
  epoch = ARGV[1]
  redis.call('DEL', stream)
  redis.call('HSET', meta, 'epoch', epoch, 'top', 0)
end
local offset = redis.call('HINCRBY', meta, 'top', 1)
local id = string.format('%d', offset)
local env = ARGV[2] .. id .. ',"epoch":"' .. epoch .. '",' .. ARGV[3]
redis.call('XADD', stream, 'MAXLEN', ARGV[4], id .. '-0', 'e', env)
redis.call('PEXPIRE', meta, ARGV[5])
redis.call('PEXPIRE', stream, ARGV[5])
redis.call(ARGV[8], ARGV[6], ARGV[7] .. '\n' .. env)
return {offset, epoch}
`)

// recoverScript reads the position and, when since's epoch matches and
// offsets are missing, the stream after since. A channel never seen gets
// its epoch here (with top 0), so a client that subscribed to an empty
// channel can resume from {0, epoch} once publications arrive.
//
// KEYS: meta, stream. ARGV: candidate epoch, TTL in ms, since epoch, since
// offset, history size. Returns {epoch, top, entries}.
var recoverScript = redis.NewScript(`
local meta, stream = KEYS[1], KEYS[2]
local epoch = redis.call('HGET', meta, 'epoch')
local top = tonumber(redis.call('HGET', meta, 'top') or '0')
if (not epoch) or (top > 0 and redis.call('EXISTS', stream) == 0) then
  epoch = ARGV[1]
  redis.call('DEL', stream)
  redis.call('HSET', meta, 'epoch', epoch, 'top', 0)
  redis.call('PEXPIRE', meta, ARGV[2])
  return {epoch, 0, {}}
end
local since = tonumber(ARGV[4])
if epoch ~= ARGV[3] or since >= top then
  return {epoch, top, {}}
end
return {epoch, top, redis.call('XRANGE', stream, string.format('%d', since + 1) .. '-0', '+', 'COUNT', ARGV[5])}
`)

package redisbroker

import "github.com/redis/go-redis/v9"

// Every channel has two keys in one Redis Cluster hash slot, named by the
// hash tag {tenant/channel}:
//
//	<prefix>{tenant/channel}:meta    hash: epoch, top (last offset), f:<scope> = newest fence value
//	<prefix>{tenant/channel}:stream  stream: entry id "<offset>-0", field e = envelope, i = message id
//	<prefix>{tenant/channel}:ids     sorted set: message id, scored by its offset, for the retained entries
//
// and one pub/sub channel, <prefix>{tenant/channel}:pub, in the same slot
// (which sharded pub/sub requires), carrying "<tenant>\n<envelope>".
// Entries written before fencing existed have no field i; entries written
// before the ids index existed are not in it.
//
// The epoch starts over (new random epoch, offset 0, stream and ids deleted) when
// the meta hash is missing, or when it records publications but the stream
// is gone: either way the history was lost (expiry, FLUSHDB, eviction).
// The fence values stay in the meta hash when only the stream was lost.

// publishScript assigns the next offset, appends the envelope to the stream
// trimmed to the history size, refreshes the three keys' expiry and publishes
// the envelope, all in one atomic step, so history and fan-out cannot
// diverge. The envelope is spliced from a head ending in "offset":, the
// offset, the epoch (hex, needs no escaping) and a tail starting at "type".
//
// With a fence scope it first refuses a fence value below the channel's
// newest for that scope, touching nothing, and otherwise stores the value
// as the newest. Values are compared as decimal strings (Lua numbers are
// doubles, inexact beyond 2^53). It then looks the message id up in the
// ids index (ZSCORE, then the entry at that offset): a retained id
// appends and publishes nothing. With takeover, an id the index misses is
// also looked for among the retained entries, newest first, 100 per
// XREVRANGE, matching field i or, in an entry without one, the envelope
// head (which holds the id and the channel), to find entries written
// before the index existed. Each append indexes its id and drops the ids
// of the offsets the stream trimmed (ZREMRANGEBYSCORE).
//
// KEYS: meta, stream, ids. ARGV: candidate epoch, envelope head, envelope tail,
// history size, TTL in ms, pub/sub channel, tenant, PUBLISH or SPUBLISH,
// fence scope ("" = unfenced), fence value, takeover ("1" or "0"), message
// id. Returns {offset, epoch}; or {"stale", newest value} when refused;
// or {"dup", envelope} when the id is retained.
var publishScript = redis.NewScript(`
local meta, stream, ids = KEYS[1], KEYS[2], KEYS[3]
local head, scope, fence, id = ARGV[2], ARGV[9], ARGV[10], ARGV[12]
local function below(a, b)
  local na, nb = a:sub(1, 1) == '-', b:sub(1, 1) == '-'
  if na ~= nb then return na end
  if #a ~= #b then return (#a < #b) ~= na end
  return a ~= b and ((a < b) ~= na)
end
if scope ~= '' then
  local newest = redis.call('HGET', meta, 'f:' .. scope)
  if newest and below(fence, newest) then
    return {'stale', newest}
  end
end
local epoch = redis.call('HGET', meta, 'epoch')
local top = tonumber(redis.call('HGET', meta, 'top') or '0')
if (not epoch) or (top > 0 and redis.call('EXISTS', stream) == 0) then
  epoch = ARGV[1]
  top = 0
  redis.call('DEL', stream, ids)
  redis.call('HSET', meta, 'epoch', epoch, 'top', 0)
end
if scope ~= '' then
  redis.call('HSET', meta, 'f:' .. scope, fence)
end
local function envOf(e)
  local f, env, eid = e[2], nil, nil
  for j = 1, #f - 1, 2 do
    if f[j] == 'e' then env = f[j + 1] elseif f[j] == 'i' then eid = f[j + 1] end
  end
  return env, eid
end
local at = redis.call('ZSCORE', ids, id)
if at then
  local eid = string.format('%d', tonumber(at)) .. '-0'
  local hit = redis.call('XRANGE', stream, eid, eid)
  if #hit == 1 then
    local env, iid = envOf(hit[1])
    if env and iid == id then
      return {'dup', env}
    end
  end
end
if ARGV[11] == '1' then
  local hi = top
  while hi > 0 do
    local batch = redis.call('XREVRANGE', stream, string.format('%d', hi) .. '-0', '-', 'COUNT', 100)
    for _, e in ipairs(batch) do
      local env, eid = envOf(e)
      if env and (eid == id or (not eid and env:sub(1, #head) == head)) then
        return {'dup', env}
      end
    end
    if #batch < 100 then break end
    hi = tonumber(string.match(batch[#batch][1], '^%d+')) - 1
  end
end
local offset = redis.call('HINCRBY', meta, 'top', 1)
local oid = string.format('%d', offset)
local env = head .. oid .. ',"epoch":"' .. epoch .. '",' .. ARGV[3]
redis.call('XADD', stream, 'MAXLEN', ARGV[4], oid .. '-0', 'e', env, 'i', id)
redis.call('ZADD', ids, offset, id)
local keep = tonumber(ARGV[4])
if offset > keep then
  redis.call('ZREMRANGEBYSCORE', ids, '-inf', offset - keep)
end
redis.call('PEXPIRE', meta, ARGV[5])
redis.call('PEXPIRE', stream, ARGV[5])
redis.call('PEXPIRE', ids, ARGV[5])
redis.call(ARGV[8], ARGV[6], ARGV[7] .. '\n' .. env)
return {offset, epoch}
`)

// recoverScript reads the position and, when since's epoch matches and
// offsets are missing, the stream after since. A channel never seen gets
// its epoch here (with top 0), so a client that subscribed to an empty
// channel can resume from {0, epoch} once publications arrive.
//
// KEYS: meta, stream, ids. ARGV: candidate epoch, TTL in ms, since epoch,
// since offset, history size. Returns {epoch, top, entries}.
var recoverScript = redis.NewScript(`
local meta, stream, ids = KEYS[1], KEYS[2], KEYS[3]
local epoch = redis.call('HGET', meta, 'epoch')
local top = tonumber(redis.call('HGET', meta, 'top') or '0')
if (not epoch) or (top > 0 and redis.call('EXISTS', stream) == 0) then
  epoch = ARGV[1]
  redis.call('DEL', stream, ids)
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

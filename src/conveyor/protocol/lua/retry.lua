-- retry: run a failed job again.
--
-- KEYS[1] base        `<prefix>:{<queue>}:`
-- KEYS[2] failed      zset
-- KEYS[3] ready       zset
-- KEYS[4] scheduled   zset
-- KEYS[5] marker      zset: wake-up marker
-- KEYS[6] events      stream
--
-- ARGV[1] id
-- ARGV[2] events stream max length
--
-- Returns: 1 when the job was failed and is waiting again, else 0.
-- Effects: ZREM failed; the expiry removed (PERSIST); failures and stalls
-- reset to 0 (attempts kept, so re-runs stay visible); `error` kept until
-- the next end; waiting at its place; marker set; a `retried` event
-- (`manual` = 1).
-- Complexity: O(log N).

-- @include common
-- @include record
-- @include upsert
-- @include place
-- @include finish

local failed, ready, scheduled, marker, events = KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local id, maxlen = ARGV[1], ARGV[2]
local job_key = base .. 'job:' .. id
if redis.call('HGET', job_key, 'state') ~= 'failed' then
  return 0
end
local now = now_ms()
redis.call('ZREM', failed, id)
redis.call('PERSIST', job_key)
redis.call('HSET', job_key, 'failures', 0, 'stalls', 0, 'run_at', now)
redis.call('HDEL', job_key, 'finished_at')
place(job_key, id, now, now, ready, scheduled, marker)
emit(events, maxlen, 'event', 'retried', 'id', id, 'manual', 1)
return 1

-- promote: run a delayed job now.
--
-- KEYS[1] base        `<prefix>:{<queue>}:`
-- KEYS[2] ready       zset
-- KEYS[3] scheduled   zset
-- KEYS[4] marker      zset: wake-up marker
-- KEYS[5] events      stream
--
-- ARGV[1] id
-- ARGV[2] events stream max length
--
-- Returns: 1 when the job was delayed and is now waiting, else 0 (nothing changes).
-- Effects: ZREM scheduled; run_at = now; waiting at its place (§3.1); marker
-- set; a `promoted` event.
-- Complexity: O(log N).

-- @include common
-- @include record
-- @include upsert
-- @include place
-- @include finish

local ready, scheduled, marker, events = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local id, maxlen = ARGV[1], ARGV[2]
local job_key = base .. 'job:' .. id
if redis.call('HGET', job_key, 'state') ~= 'delayed' then
  return 0
end
local now = now_ms()
redis.call('ZREM', scheduled, id)
redis.call('HSET', job_key, 'run_at', now)
place(job_key, id, now, now, ready, scheduled, marker)
emit(events, maxlen, 'event', 'promoted', 'id', id)
return 1

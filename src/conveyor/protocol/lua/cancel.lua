-- cancel: remove a job that has not started (waiting, delayed) and any
-- blocked twin of a running singleton.
--
-- KEYS[1] base        `<prefix>:{<queue>}:`
-- KEYS[2] ready       zset
-- KEYS[3] scheduled   zset
-- KEYS[4] blocked     zset
-- KEYS[5] events      stream
--
-- ARGV[1] id
-- ARGV[2] events stream max length
--
-- Returns: 1 when something was removed, 0 when the job did not exist or
-- is running or finished (then nothing changes; a running job's blocked twin
-- is still removed and counts as 1).
-- Effects: the job hash and its index entry deleted; a `cancelled` event.
-- Complexity: O(log N).

-- @include common
-- @include record
-- @include upsert
-- @include place
-- @include finish

local ready, scheduled, blocked_index, events = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local id, maxlen = ARGV[1], ARGV[2]
local job_key = base .. 'job:' .. id
local removed = 0
if redis.call('DEL', base .. 'blocked:' .. id) == 1 then
  redis.call('ZREM', blocked_index, id)
  removed = 1
end
if drop_pending(job_key, id, ready, scheduled) then
  removed = 1
end
if removed == 1 then
  emit(events, maxlen, 'event', 'cancelled', 'id', id)
end
return removed

-- reprioritize: change the priority of a job that has not started.
--
-- KEYS[1] base        `<prefix>:{<queue>}:`
-- KEYS[2] ready       zset
-- KEYS[3] events      stream
--
-- ARGV[1] id
-- ARGV[2] priority    0 .. 2^21
-- ARGV[3] events stream max length
--
-- Returns: 1 when the job is waiting or delayed (its priority changed), else 0.
-- Effects: `priority` set; a waiting job is re-scored in its ready index
-- (keeping its seq); a `reprioritized` event.
-- Complexity: O(log N).

-- @include common
-- @include record
-- @include upsert
-- @include place
-- @include finish

local ready, events = KEYS[2], KEYS[3]
local id, priority, maxlen = ARGV[1], ARGV[2], ARGV[3]
local job_key = base .. 'job:' .. id
local f = redis.call('HMGET', job_key, 'state', 'seq', 'group')
if f[1] ~= 'waiting' and f[1] ~= 'delayed' then
  return 0
end
redis.call('HSET', job_key, 'priority', priority)
if f[1] == 'waiting' then
  local key = ready
  if f[3] and f[3] ~= '' then key = group_ready(f[3]) end
  redis.call('ZADD', key, 'XX', ready_score(priority, f[2]), id)
end
emit(events, maxlen, 'event', 'reprioritized', 'id', id, 'priority', priority)
return 1

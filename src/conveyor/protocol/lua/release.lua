-- release: give leased jobs back unrun (a worker shutting down), with no
-- failure or stall counted.
--
-- KEYS[1] base        `<prefix>:{<queue>}:`
-- KEYS[2] active      zset: lease deadline ms
-- KEYS[3] ready       zset
-- KEYS[4] scheduled   zset
-- KEYS[5] marker      zset: wake-up marker
-- KEYS[6] events      stream
-- KEYS[7] blocked     zset: ids with a blocked twin
--
-- ARGV[1] events stream max length
-- ARGV[2 ..] per job, 3 entries: id, token, started 0|1 (whether its handler
--   had begun: an interrupted run keeps its attempt, so the re-run sees
--   attempt >= 2 and knows it is a re-delivery)
--
-- Returns, per job in order: 1 = released, 0 = lease already lost.
-- Effects: the job leaves `active`; attempts - 1 when it never started;
-- back to ready at its old place, a blocked twin merged
-- (scheduled instead if the merge set a later run_at);
-- a `released` event; the marker wakes another worker.
-- Complexity: O(batch * log N).

-- @include common
-- @include record
-- @include upsert
-- @include place
-- @include unpark
-- @include finish

local active, ready, scheduled, marker = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local events, blocked_index = KEYS[6], KEYS[7]
local maxlen = ARGV[1]
local now = now_ms()

local out = {}
for i = 2, #ARGV, 3 do
  local id, token, started = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local job_key = base .. 'job:' .. id
  local f = redis.call('HMGET', job_key, 'state', 'token')
  if f[1] ~= 'active' or f[2] ~= token then
    out[#out + 1] = 0
  else
    redis.call('ZREM', active, id)
    end_run(job_key, marker)
    if started ~= '1' then
      redis.call('HSET', job_key, 'attempts',
                 math.max(0, num(redis.call('HGET', job_key, 'attempts'), 1) - 1))
    end
    local due = merge_blocked(job_key, id, blocked_index, now)
    place(job_key, id, due, now, ready, scheduled, marker)
    emit(events, maxlen, 'event', 'released', 'id', id)
    out[#out + 1] = 1
  end
end
return out

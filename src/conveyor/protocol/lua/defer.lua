-- defer: a running job moves itself back to delayed (or waiting) without
-- counting an attempt or a failure: "sleep without holding a slot"
-- (docs/protocol.md §16.7).
--
-- KEYS[1] base        `<prefix>:{<queue>}:`
-- KEYS[2] active      zset: lease deadline ms
-- KEYS[3] ready       zset
-- KEYS[4] scheduled   zset: due ms
-- KEYS[5] marker      zset: wake-up marker
-- KEYS[6] events      stream
-- KEYS[7] blocked     zset: ids with a blocked twin
--
-- ARGV[1] events stream max length
-- ARGV[2 ..] per job, 4 entries: id, token, delay_ms (>= 0), checkpoint
--   (JSON text, or '' to keep the saved one)
--
-- Returns, per job in order: 1 = deferred, 0 = lease already lost.
-- Effects: the job leaves `active`; attempts - 1 (the run does not count);
-- the checkpoint saved when given; a blocked twin merged; placed at
-- max(now + delay_ms, merged run_at): delayed, or waiting at its old place;
-- a `deferred` event (delay_ms). No failure or stall is counted.
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
for i = 2, #ARGV, 4 do
  local id, token, delay, state = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]) or 0, ARGV[i + 3]
  local job_key = base .. 'job:' .. id
  local f = redis.call('HMGET', job_key, 'state', 'token', 'attempts', 'group')
  if f[1] ~= 'active' or f[2] ~= token then
    out[#out + 1] = 0
  else
    redis.call('ZREM', active, id)
    end_run(job_key, marker, f[4] or false)
    redis.call('HSET', job_key, 'attempts', math.max(0, num(f[3], 1) - 1))
    if state ~= '' then
      redis.call('HSET', job_key, 'checkpoint', state)
    end
    local due = merge_blocked(job_key, id, blocked_index, now + math.max(0, delay))
    place(job_key, id, due, now, ready, scheduled, marker)
    emit(events, maxlen, 'event', 'deferred', 'id', id, 'delay_ms', due - now)
    out[#out + 1] = 1
  end
end
return out

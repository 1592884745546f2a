-- rate_limited: a handler met an external limit (an HTTP 429, say): give its
-- jobs back unpunished and hold the queue, or the jobs' groups, for a while
-- (docs/protocol.md §16.4).
--
-- KEYS[1] base        `<prefix>:{<queue>}:`
-- KEYS[2] active      zset: lease deadline ms
-- KEYS[3] ready       zset
-- KEYS[4] scheduled   zset
-- KEYS[5] marker      zset: wake-up marker
-- KEYS[6] events      stream
-- KEYS[7] blocked     zset: ids with a blocked twin
-- KEYS[8] meta        hash: `held_until` (the queue's hold)
-- KEYS[9] groups      zset
-- KEYS[10] gwait      zset: held groups by when to look again
--
-- ARGV[1] events stream max length
-- ARGV[2] wait_ms     how long the queue or group waits (> 0)
-- ARGV[3] scope       'queue' | 'group' (a job without a group holds the queue)
-- ARGV[4 ..] per job, 2 entries: id, token
--
-- Returns, per job in order: 1 = given back, 0 = lease already lost.
-- Effects: per job whose lease matches: it leaves `active` with no failure
-- or stall counted (its attempt stays: the handler ran), back to ready at
-- its old place (a blocked twin merged, as release does); a `rate_limited`
-- event (`wait_ms`, `scope`). Then the hold: `meta held_until` = now +
-- wait_ms (never lowered) for the queue; for a group, the group leaves
-- `groups` for `gwait` scored now + wait_ms (never lowered). Claims take
-- nothing held before then and report the hold's end as next_due_ms.
-- Complexity: O(batch * log N).

-- @include common
-- @include record
-- @include upsert
-- @include place
-- @include unpark
-- @include finish

local active, ready, scheduled, marker = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local events, blocked_index, meta = KEYS[6], KEYS[7], KEYS[8]
local groups, gwait = KEYS[9], KEYS[10]
local maxlen, wait_ms, scope = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local now = now_ms()
local until_ms = now + wait_ms

local function hold_queue()
  if num(redis.call('HGET', meta, 'held_until'), 0) < until_ms then
    redis.call('HSET', meta, 'held_until', until_ms)
  end
end

local function hold_group(group)
  local score = redis.call('ZSCORE', gwait, group)
  if score and (score == 'inf' or tonumber(score) >= until_ms) then return end
  redis.call('ZREM', groups, group)
  redis.call('ZADD', gwait, until_ms, group)
end

local out = {}
for i = 4, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local job_key = base .. 'job:' .. id
  local f = redis.call('HMGET', job_key, 'state', 'token', 'group')
  if f[1] ~= 'active' or f[2] ~= token then
    out[#out + 1] = 0
  else
    redis.call('ZREM', active, id)
    end_run(job_key, marker, f[3] or false)
    local due = merge_blocked(job_key, id, blocked_index, now)
    place(job_key, id, due, now, ready, scheduled, marker)
    if scope == 'group' and f[3] and f[3] ~= '' then
      hold_group(f[3])
    else
      hold_queue()
    end
    emit(events, maxlen, 'event', 'rate_limited', 'id', id, 'wait_ms', wait_ms, 'scope', scope)
    out[#out + 1] = 1
  end
end
return out

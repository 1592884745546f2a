-- flow_wait: a running job gives up its lease until its pending children
-- have settled (the step-job pattern, docs/protocol.md §14.10).
--
-- KEYS[1] base        `<prefix>:{<queue>}:`
-- KEYS[2] active      zset: lease deadline ms
-- KEYS[3] ready       zset
-- KEYS[4] scheduled   zset
-- KEYS[5] marker      zset: wake-up marker
-- KEYS[6] events      stream
-- KEYS[7] wchildren   zset: ids in waiting_children
--
-- ARGV[1] id
-- ARGV[2] token       its lease's fencing token
-- ARGV[3] events stream max length
--
-- Returns: 'waiting_children' (children still pending: the job waits, as a
-- parent of a flow) | 'waiting' (none pending: back in ready at its place,
-- to run again at once) | 'failed' (a child failed under `fail` while the
-- job ran, field child_failed: the job fails for good as flow_settle fails a
-- parent; 'failed+' when its hand-off went to `outbox`: drain it now,
-- §14.5) | 'lost' (not active with this token: nothing changes).
--
-- Effects: the run ends without an outcome: the job leaves `active`, its
-- group's slot is freed, `attempts` - 1 (the run neither failed nor
-- stalled); then `waiting_children` (wchildren, event `waiting_children`)
-- or placed (event `children_done`). Waiters are not told: the job has not
-- finished.
-- Complexity: O(log N).

-- @include common
-- @include record
-- @include upsert
-- @include place
-- @include finish
-- @include counts
-- @include flow

local active, ready, scheduled, marker = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local events, wchildren = KEYS[6], KEYS[7]
local id, token, maxlen = ARGV[1], ARGV[2], ARGV[3]
local now = now_ms()
local job_key = base .. 'job:' .. id
local f = redis.call('HMGET', job_key, 'state', 'token', 'attempts', 'child_failed')
if f[1] ~= 'active' or f[2] ~= token then
  return 'lost'
end
redis.call('ZREM', active, id)
end_run(job_key, marker)
if f[4] then  -- a child failed under `fail` while this run went on: the job fails now
  local newline = string.find(f[4], '\n', 1, true) or (#f[4] + 1)
  fail_parent(job_key, id, string.sub(f[4], 1, newline - 1), string.sub(f[4], newline + 1), now,
              maxlen)
  return outbox_sent and 'failed+' or 'failed'
end
redis.call('HSET', job_key, 'attempts', math.max(0, field(f[3], 'attempts') - 1))
local pending = redis.call('SCARD', base .. 'pending:' .. id)
if pending > 0 then
  redis.call('HSET', job_key, 'state', 'waiting_children')
  redis.call('ZADD', wchildren, now, id)
  emit(events, maxlen, 'event', 'waiting_children', 'id', id, 'children', pending)
  return 'waiting_children'
end
place(job_key, id, now, now, ready, scheduled, marker)
emit(events, maxlen, 'event', 'children_done', 'id', id)
return 'waiting'

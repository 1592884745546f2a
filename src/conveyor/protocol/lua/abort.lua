-- abort: stop a job wherever it is. A job that has not started (waiting,
-- delayed) is cancelled exactly as cancel does (its blocked twin too). A
-- running one gets `abort` = 1 and its worker is woken through its wake key
-- (`wake:<worker>`, member `abort=<id>`) and told again by every heartbeat
-- (heartbeat.lua) until it has stopped the handler and failed the run for
-- good with `AbortedError` (fail.lua, permanent): the run's end is written
-- by its worker, never while its code may still run.
--
-- KEYS[1] base        `<prefix>:{<queue>}:` — job:<id>, blocked:<id>, wake:<worker>
-- KEYS[2] ready       zset
-- KEYS[3] scheduled   zset
-- KEYS[4] blocked     zset
-- KEYS[5] events      stream
--
-- ARGV[1] id
-- ARGV[2] events stream max length
--
-- Returns: 'cancelled' (it had not started: removed, as cancel; 'cancelled+'
-- when, as for cancel, a flow's hand-off went to `outbox`: drain it now), 'aborting'
-- (running: its worker was told; asked again, the same), 'finished' (completed
-- or failed already), 'refused' (another state, e.g. a flow's parent waiting
-- for its children: nothing changes), 'missing' (no record).
-- Effects: cancelled: as cancel (record and twin deleted, event `cancelled`, a
-- flow's child settles as failed towards its parent: docs/protocol.md §14.9);
-- aborting: HSET abort 1, ZADD wake:<worker> 0 abort=<id> (PEXPIRE 600000), event
-- `abort_requested` (`worker`) the first time only.
-- Complexity: O(log N).

-- @include common
-- @include record
-- @include upsert
-- @include place
-- @include finish
-- @include counts
-- @include flow

local ready, scheduled, blocked_index, events = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local id, maxlen = ARGV[1], ARGV[2]
local job_key = base .. 'job:' .. id
local f = redis.call('HMGET', job_key, 'state', 'worker', 'abort')
local state, worker, asked = f[1], f[2], f[3]

if state == false then
  return 'missing'
end
if state == 'active' then
  if asked == false then
    redis.call('HSET', job_key, 'abort', '1')
    emit(events, maxlen, 'event', 'abort_requested', 'id', id, 'worker', worker or '')
  end
  if worker then
    local wake = base .. 'wake:' .. worker
    redis.call('ZADD', wake, 0, 'abort=' .. id)
    -- a dead worker never deletes its wake key: let it go (heartbeats repeat the news)
    redis.call('PEXPIRE', wake, 600000)
  end
  return 'aborting'
end
if state == 'completed' or state == 'failed' then
  return 'finished'
end
if state ~= 'waiting' and state ~= 'delayed' then
  return 'refused'
end
if redis.call('DEL', base .. 'blocked:' .. id) == 1 then
  redis.call('ZREM', blocked_index, id)
end
flow_dropped(job_key, id, state, now_ms(), maxlen)  -- a flow's child: its parent is told
drop_pending(job_key, id, ready, scheduled)
emit(events, maxlen, 'event', 'cancelled', 'id', id)
return outbox_sent and 'cancelled+' or 'cancelled'

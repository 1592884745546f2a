-- suspect: an operator's word on a suspect, a job whose last worker died with
-- it (stalls > 0, not released; protocol §6.2, §6.21). `release` lets it run as
-- any other job from its next claim on (`trusted` = 1, until it stalls again);
-- `fail` ends a waiting or delayed one failed for good, unrun. A running one is
-- not failed here: its worker must stop it first (abort.lua).
--
-- KEYS[1] base        `<prefix>:{<queue>}:` — job:<id>, gready:<group>
-- KEYS[2] ready       zset
-- KEYS[3] scheduled   zset
-- KEYS[4] failed      zset: failed ids by expiry ms
-- KEYS[5] events      stream
-- KEYS[6] marker      zset: wake-up marker
--
-- ARGV[1] id
-- ARGV[2] action      `release` or `fail`
-- ARGV[3] events stream max length
--
-- Returns: 'released', 'failed', 'running' (fail of a running suspect: nothing
-- changed), 'missing' (no record), 'not_suspect' (finished, never stalled, or
-- released already: nothing changed), 'bad_action' (nothing changed).
-- Effects: release: HSET trusted 1, event `trusted` (`stalls`), the wake marker
-- when it is waiting (a worker that stepped over it claims it now); fail: taken off
-- ready (or its group's) and scheduled, state failed with `error` and
-- `finished_at`, event `failed`, waiters told, a failure-lane job when the task
-- has a failure handler, a flow child's hand-off to its parent (flow.lua), the
-- record kept for its result_ttl.
-- Complexity: O(log N).

-- @include common
-- @include record
-- @include upsert
-- @include place
-- @include unpark
-- @include finish
-- @include counts
-- @include flow

local ready, scheduled, failed, events, marker = KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local id, action, maxlen = ARGV[1], ARGV[2], ARGV[3]
if action ~= 'release' and action ~= 'fail' then
  return 'bad_action'
end
local job_key = base .. 'job:' .. id
local f = redis.call('HMGET', job_key, 'state', 'stalls', 'trusted', 'group', 'result_ttl')
local state = f[1]
if not state then
  return 'missing'
end
local stalls = tonumber(f[2] or '0') or 0
local open = state == 'waiting' or state == 'delayed' or state == 'active'
if not open or stalls < 1 or f[3] then
  return 'not_suspect'
end
if action == 'release' then
  redis.call('HSET', job_key, 'trusted', '1')
  emit(events, maxlen, 'event', 'trusted', 'id', id, 'stalls', int_text(stalls))
  if state == 'waiting' then
    wake(marker)
  end
  return 'released'
end
if state == 'active' then
  return 'running'
end
local now = now_ms()
unready(ready, id, f[4])
redis.call('ZREM', scheduled, id)
local err = 'SuspectFailedError: failed by an operator, unrun: its worker died with it '
            .. stalls .. ' time(s)'
redis.call('HSET', job_key, 'state', 'failed', 'finished_at', now, 'error', err)
emit(events, maxlen, 'event', 'failed', 'id', id, 'error', err)
hand_to_failure_lane(job_key, id, err, now, maxlen)
notify_waiters(job_key, id, 'failed', err)
local flow = redis.call('HMGET', job_key, 'parent', 'on_fail', 'children')
if flow[1] or flow[3] then  -- a flow's node: settle towards its parent (§14.4)
  flow_finished(id, 'failed', err, flow[1], flow[2], flow[3], field(f[5], 'result_ttl'), now,
                maxlen)
end
retain(job_key, id, failed, field(f[5], 'result_ttl'), now)
return 'failed'

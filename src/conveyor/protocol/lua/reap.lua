-- reap: recover jobs whose lease expired (their worker died or hung).
--
-- KEYS[1] base        `<prefix>:{<queue>}:`
-- KEYS[2] active      zset: lease deadline ms
-- KEYS[3] failed      zset: failed ids by expiry ms
-- KEYS[4] ready       zset
-- KEYS[5] scheduled   zset
-- KEYS[6] marker      zset: wake-up marker
-- KEYS[7] events      stream
-- KEYS[8] blocked     zset: ids with a blocked twin
-- KEYS[9] completed   zset: finished ids by expiry ms
--
-- ARGV[1] batch       at most this many expired leases handled
-- ARGV[2] events stream max length
--
-- Returns: {recovered, failed, next_deadline_ms | -1, more, sent}
--   next_deadline_ms is the earliest lease still running, so a reaper can
--   sleep until it. more is 1 when a bound was hit and work is left (a full
--   batch of expired leases, or an index still holding an expired or surplus
--   entry after its sweep): the caller should reap again; else 0. sent is 1
--   when a final stall's flow hand-off went to `outbox` (drain it now, §14.5).
--
-- Effects: per expired lease: stalls + 1 (and `trusted` deleted: a suspect
-- again, suspect.lua) and the stall in the attempt
-- history `errors` (history.lua) (the token stays in the record, but
-- the state is no longer active, so the old worker's writes are refused from
-- now on); back to ready at its old place,
-- a blocked twin merged (scheduled instead if the merge set a later run_at;
-- a `stalled` event), or state failed with error "stalled" once stalls
-- reaches max_stalls (a `failed` event, waiters told, a blocked twin released
-- keeping the ended run's attempts and stalls, so it runs alone as a suspect,
-- a failure-lane job when the task has a failure handler, a flow child's
-- hand-off to its parent (flow.lua);
-- up to 2 expired failed records swept per job failed); the stalls added to
-- `totals` (`stalled`, and `retried` or `failed`) and the minute's counts
-- (counts.lua); then
-- expired (or, with meta keep_*, surplus) completed and failed records swept,
-- up to 10 x `batch` each.
-- Complexity: O(batch * log N).

-- @include common
-- @include record
-- @include upsert
-- @include place
-- @include unpark
-- @include finish
-- @include counts
-- @include flow
-- @include history

local active, failed, ready, scheduled = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local marker, events, blocked_index = KEYS[6], KEYS[7], KEYS[8]
local batch, maxlen = tonumber(ARGV[1]), ARGV[2]
local now = now_ms()

local function stall_error(stalls)
  return 'StalledError: lease expired ' .. stalls .. ' time(s); the worker died or hung'
end

local recovered, failed_count = 0, 0
local expired = redis.call('ZRANGEBYSCORE', active, '-inf', now, 'LIMIT', 0, batch)
for _, id in ipairs(expired) do
  redis.call('ZREM', active, id)
  local job_key = base .. 'job:' .. id
  local f = redis.call('HMGET', job_key, 'state', 'max_stalls', 'result_ttl', 'stalls',
                       'attempts')
  if f[1] == 'active' then
    end_run(job_key, marker)
    local stalls = field(f[4], 'stalls') + 1
    redis.call('HSET', job_key, 'stalls', stalls)
    redis.call('HDEL', job_key, 'trusted')  -- released by an operator: a suspect again
    remember_error(job_key, f[5], stall_error(stalls), now, 'stalled')  -- attempt history
    if stalls >= field(f[2], 'max_stalls') then
      local err = stall_error(stalls)
      redis.call('HSET', job_key, 'state', 'failed', 'finished_at', now, 'error', err)
      emit(events, maxlen, 'event', 'failed', 'id', id, 'error', err)
      hand_to_failure_lane(job_key, id, err, now, maxlen)
      notify_waiters(job_key, id, 'failed', err)
      local flow = redis.call('HMGET', job_key, 'parent', 'on_fail', 'children')
      if flow[1] or flow[3] then  -- a flow's node: settle towards its parent (§14.4)
        flow_finished(id, 'failed', err, flow[1], flow[2], flow[3], field(f[3], 'result_ttl'),
                      now, maxlen)
      end
      if not release_blocked(job_key, id, now, ready, scheduled, marker, blocked_index,
                             {'attempts', 'stalls'}) then
        retain(job_key, id, failed, field(f[3], 'result_ttl'), now)
      end
      failed_count = failed_count + 1
    else
      local due = merge_blocked(job_key, id, blocked_index, now)
      place(job_key, id, due, now, ready, scheduled, marker)
      emit(events, maxlen, 'event', 'stalled', 'id', id, 'stalls', stalls)
      recovered = recovered + 1
    end
  end
end
count_outcomes(now, 0, failed_count, recovered, recovered + failed_count)
-- Finished records expire even when no run ends to sweep them: every reap
-- (each worker's beat) also sweeps a bounded batch of both indexes.
sweep(failed, now, 2 * failed_count + 10 * batch)
sweep(KEYS[9], now, 10 * batch)

-- Work left behind a bound: the oldest entry is still due, or a keep_* cap
-- is still exceeded. O(log N).
local function left(index)
  local oldest = redis.call('ZRANGE', index, 0, 0, 'WITHSCORES')
  if #oldest > 0 and tonumber(oldest[2]) <= now then return true end
  local keep = tonumber(redis.call('HGET', base .. 'meta', 'keep_' .. string.sub(index, #base + 1)))
  return keep ~= nil and redis.call('ZCARD', index) > keep
end

local first = redis.call('ZRANGE', active, 0, 0, 'WITHSCORES')
local next_deadline = -1
if #first > 0 then next_deadline = tonumber(first[2]) end
local more = 0
if #expired == batch or left(failed) or left(KEYS[9]) then more = 1 end
return {recovered, failed_count, next_deadline, more, outbox_sent and 1 or 0}

-- fail: end leased runs that raised; retry with backoff or fail for good.
--
-- KEYS[1] base        `<prefix>:{<queue>}:`
-- KEYS[2] active      zset: lease deadline ms
-- KEYS[3] failed      zset: failed ids by expiry ms
-- KEYS[4] ready       zset
-- KEYS[5] scheduled   zset: due ms
-- KEYS[6] marker      zset: wake-up marker
-- KEYS[7] events      stream
-- KEYS[8] blocked     zset: ids with a blocked twin
--
-- ARGV[1] events stream max length
-- ARGV[2 ..] per job, 6 entries:
--   id, token, error (text), permanent 0|1, retry_delay_ms|'' (overrides
--   the backoff), jitter in [0, 1)
--
-- Backoff: min(max_backoff, min_backoff * 2^(failures - 1)), then scaled by
-- 0.5 + jitter / 2 and clamped to at least min_backoff ("equal jitter").
-- A merged blocked twin may push the retry later (to its run_at), never earlier.
-- A missing or non-numeric max_failures, min_backoff or max_backoff takes its
-- record default (3, 1000, 300000: protocol §4.1).
--
-- Returns, per job in order: 'retried' | 'delayed' (retry scheduled) |
-- 'failed' (no retries left, or permanent) | 'failed+' (the same, and its
-- flow hand-off went to `outbox`: drain it now, §14.5) | 'lost' (lease lost:
-- refused).
--
-- Effects: failures + 1 and error, the error appended to the attempt
-- history `errors` (history.lua); the job leaves `active`; then either
-- ready/scheduled again, a blocked twin merged (a `retried` event with the
-- error and delay_ms, the delay actually applied) or state failed, kept
-- result_ttl ms in `failed`, waiters told, a blocked twin released (a
-- `failed` event; a job in the failure lane when the task has a failure
-- handler — see finish.lua; a flow child's hand-off to its parent — see
-- flow.lua). Up to 2 expired failed records swept per job. The runs failed
-- for good and retried added to `totals` and the minute's counts (counts.lua).
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
local maxlen = ARGV[1]
local now = now_ms()

local function backoff(f, failures, jitter)
  local low, high = field(f[4], 'min_backoff'), field(f[5], 'max_backoff')
  local delay = math.min(high, low * 2 ^ (failures - 1))
  return math.floor(math.max(low, delay * (0.5 + jitter / 2)))
end

local function fail_for_good(job_key, id, err, ttl)
  outbox_sent = false
  redis.call('HSET', job_key, 'state', 'failed', 'finished_at', now)
  emit(events, maxlen, 'event', 'failed', 'id', id, 'error', err)
  hand_to_failure_lane(job_key, id, err, now, maxlen)
  notify_waiters(job_key, id, 'failed', err)
  local flow = redis.call('HMGET', job_key, 'parent', 'on_fail', 'children')
  if flow[1] or flow[3] then  -- a flow's node: settle towards its parent (§14.4)
    flow_finished(id, 'failed', err, flow[1], flow[2], flow[3], field(ttl, 'result_ttl'), now, maxlen)
  end
  if not release_blocked(job_key, id, now, ready, scheduled, marker, blocked_index) then
    retain(job_key, id, failed, field(ttl, 'result_ttl'), now)
  end
  return outbox_sent and 'failed+' or 'failed'
end

local function retry(job_key, id, err, delay)
  local due = merge_blocked(job_key, id, blocked_index, now + delay)
  local state = place(job_key, id, due, now, ready, scheduled, marker)
  emit(events, maxlen, 'event', 'retried', 'id', id, 'error', err, 'delay_ms', due - now)
  return state == 'waiting' and 'retried' or 'delayed'
end

local out = {}
local failed_n, retried_n = 0, 0
for i = 2, #ARGV, 6 do
  local id, token, err = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local permanent, override, jitter = ARGV[i + 3], ARGV[i + 4], tonumber(ARGV[i + 5])
  local job_key = base .. 'job:' .. id
  local f = redis.call('HMGET', job_key, 'state', 'token', 'max_failures', 'min_backoff',
                       'max_backoff', 'result_ttl', 'failures', 'attempts')
  if f[1] ~= 'active' or f[2] ~= token then
    out[#out + 1] = 'lost'
  else
    redis.call('ZREM', active, id)
    end_run(job_key, marker)
    local failures = field(f[7], 'failures') + 1
    redis.call('HSET', job_key, 'failures', failures, 'error', err)
    remember_error(job_key, f[8], err, now, 'failed')
    if permanent == '1' or failures >= field(f[3], 'max_failures') then
      out[#out + 1] = fail_for_good(job_key, id, err, f[6])
      failed_n = failed_n + 1
    else
      local delay = override ~= '' and tonumber(override) or backoff(f, failures, jitter)
      out[#out + 1] = retry(job_key, id, err, delay)
      retried_n = retried_n + 1
    end
  end
end
count_outcomes(now, 0, failed_n, retried_n, 0)
sweep(failed, now, 2 * #out)
return out

-- claim: promote due delayed jobs, then lease up to `count` ready jobs,
-- within the queue's and the groups' limits, round robin between groups.
--
-- KEYS[1] base        `<prefix>:{<queue>}:` — job:<id>, gready:<group>, gconf:<group>,
--                     rate:<window>, grate:<group>:<window> derive from it
-- KEYS[2] meta        hash: `paused`; limits `concurrency`, `rate`, `window`;
--                     group defaults `group_concurrency`, `group_rate`, `group_window`;
--                     round-robin counters `rr`, `rr_ungrouped`
-- KEYS[3] ready       zset: ungrouped jobs, priority * 2^31 + seq
-- KEYS[4] scheduled   zset: due ms
-- KEYS[5] active      zset: lease deadline ms
-- KEYS[6] marker      zset: wake-up marker
-- KEYS[7] events      stream
-- KEYS[8] failed      zset: failed ids by expiry ms
-- KEYS[9] groups      zset: groups with ready jobs that may run, by last service
-- KEYS[10] gwait      zset: groups held back (paused, at a limit), by when to look again
-- KEYS[11] gactive    hash: group -> running jobs
--
-- ARGV[1] worker id
-- ARGV[2] count       at most this many jobs
-- ARGV[3] lease_ms    lease length
-- ARGV[4] token       random fencing token for this claim (the worker's writes must match)
-- ARGV[5] promote     at most this many due delayed jobs (and held-back groups) promoted per call
-- ARGV[6] events stream max length
-- ARGV[7] alone       1 (or absent) when the worker runs nothing now: only then may it take a
--                     job that stalled before (its worker died with it), and then
--                     that job alone
--
-- Returns: {now_ms, next_due_ms | -1, held 0|1, then 14 fields per claimed job:
--   id, task, data, attempts, failures, stalls, max_failures, max_stalls,
--   min_backoff, max_backoff, timeout, priority, created_at, schedule}
--   (schedule: the schedule id of a repeatable job's tick, else nil)
--   next_due_ms is the earliest moment something may become claimable by
--   time (a delayed job, a rate window, a held-back group), so an idle
--   worker can block until then instead of polling. held = 1 when a suspect
--   was met that this call could not take: a worker that runs jobs should
--   let them end, then claim again alone.
--
-- Effects: promoted jobs move scheduled -> ready (keeping their enqueue
-- order); groups whose hold expired go back into the rotation; claimed jobs
-- move to active with state, token, worker, started_at and attempts + 1; an
-- `active` event per job; rate-window counters and group slots counted;
-- when jobs remain ready, the marker is set so another idle worker wakes.
-- Without groups, jobs are taken in ready order. With groups, one job at a
-- time from the group served least recently (ungrouped jobs count as one
-- group); a group that is paused or at its concurrency or rate limit is
-- moved to gwait and skipped.
-- An id whose record is missing, has an unknown state or non-numeric
-- counters is recorded as failed with a reason; one whose record is in
-- another known state (a stale index entry) is dropped.
-- A job that has stalled before (its worker died with it) is claimed alone,
-- by a worker that runs nothing else (ARGV[7]): if it is a poison job that
-- kills workers, it takes no other job down with it. Met in any other case,
-- it and the jobs popped after it go back, and the claim stops there.
-- Complexity: O((promote + count + 32) * log N).

-- @include common
-- @include record

local meta, ready, scheduled, active = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local marker, events, failed = KEYS[6], KEYS[7], KEYS[8]
local groups, gwait, gactive = KEYS[9], KEYS[10], KEYS[11]
local worker, count, lease, token = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local promote_limit, maxlen, alone = tonumber(ARGV[5]), ARGV[6], ARGV[7] ~= '0'
local now = now_ms()
local INF = -1  -- "until an event", stored as +inf in gwait

local FIELDS = {'state', 'task', 'data', 'attempts', 'failures', 'stalls', 'max_failures',
                'max_stalls', 'min_backoff', 'max_backoff', 'timeout', 'priority', 'created_at',
                'schedule', 'group', 'data2', 'data3'}
local RETURNED = 14
-- Returned fields a record leaves out when they hold their default, by
-- position, and the text of that default (replies carry bulk strings).
local DEFAULTED = {[5] = 'failures', [6] = 'stalls', [7] = 'max_failures', [8] = 'max_stalls',
                   [9] = 'min_backoff', [10] = 'max_backoff', [11] = 'timeout',
                   [12] = 'priority'}
for k, name in pairs(DEFAULTED) do
  DEFAULTED[k] = tostring(RECORD_DEFAULTS[name])
end
local KNOWN_STATES = {waiting = true, delayed = true, active = true, completed = true,
                      failed = true, blocked = true, waiting_children = true}

local out = {now, -1, 0}  -- now, next due, held back by a suspect (1/0), jobs...
local next_due = nil
local function due_at(ms)
  if ms and (not next_due or ms < next_due) then next_due = ms end
end

local function group_ready(group)
  return base .. 'gready:' .. group
end

-- Jobs due at the same moment keep their enqueue order: the ready score
-- comes from the sequence number given at enqueue, not from promotion.
local function promote()
  local due = redis.call('ZRANGEBYSCORE', scheduled, '-inf', now, 'LIMIT', 0, promote_limit)
  for _, id in ipairs(due) do
    redis.call('ZREM', scheduled, id)
    local job_key = base .. 'job:' .. id
    local f = redis.call('HMGET', job_key, 'priority', 'seq', 'group', 'state')
    if f[4] then  -- a record without a seq (corrupt) still runs, at seq 0: never stranded
      redis.call('HSET', job_key, 'state', 'waiting')
      if f[3] and f[3] ~= '' then
        redis.call('ZADD', group_ready(f[3]), ready_score(f[1], f[2]), id)
        if not redis.call('ZSCORE', gwait, f[3]) then
          redis.call('ZADD', groups, 'NX', 0, f[3])
        end
      else
        redis.call('ZADD', ready, ready_score(f[1], f[2]), id)
      end
    end
  end
  local held = redis.call('ZRANGEBYSCORE', gwait, '-inf', now, 'LIMIT', 0, promote_limit)
  for _, group in ipairs(held) do
    redis.call('ZREM', gwait, group)
    if redis.call('ZCARD', group_ready(group)) > 0 then
      redis.call('ZADD', groups, 'NX', 0, group)
    end
  end
end

-- A fixed-window counter: how many were taken in the window holding `now`.
local function window(key_prefix, window_ms)
  local index = math.floor(now / window_ms)
  local key = key_prefix .. index
  return key, num(redis.call('GET', key), 0), (index + 1) * window_ms
end

local function count_in_window(key, window_ms, n)
  redis.call('INCRBY', key, n)
  redis.call('PEXPIRE', key, window_ms * 2)
end

local limits = redis.call('HMGET', meta, 'paused', 'concurrency', 'rate', 'window',
                          'group_concurrency', 'group_rate', 'group_window', 'rr_ungrouped')

-- How many jobs the queue-wide limits let this call take.
local function queue_allowance()
  local allowed = count
  local cap = tonumber(limits[2])
  if cap then
    allowed = math.min(allowed, cap - redis.call('ZCARD', active))
  end
  local rate = tonumber(limits[3])
  if rate then
    local window_ms = num(limits[4], 1000)
    local _, used, ends = window(base .. 'rate:', window_ms)
    if used >= rate then due_at(ends) end
    allowed = math.min(allowed, rate - used)
  end
  return math.max(allowed, 0)
end

-- Nil when `group` may run a job now; else when to look again (INF: on an event).
local function group_hold(group)
  local conf = redis.call('HMGET', base .. 'gconf:' .. group, 'paused', 'concurrency', 'rate',
                          'window')
  if conf[1] == '1' then return INF end
  local cap = tonumber(conf[2]) or tonumber(limits[5])
  if cap and num(redis.call('HGET', gactive, group), 0) >= cap then return INF end
  local rate = tonumber(conf[3]) or tonumber(limits[6])
  if rate then
    local _, used, ends = window(base .. 'grate:' .. group .. ':', num(conf[4], num(limits[7], 1000)))
    if used >= rate then return ends end
  end
  return nil
end

local function hold(group, until_ms)
  redis.call('ZREM', groups, group)
  if until_ms == INF then
    redis.call('ZADD', gwait, '+inf', group)
  else
    redis.call('ZADD', gwait, until_ms, group)
  end
end

-- A ready id whose record cannot run; keep a visible trace of it for a day.
local function fail_corrupt(id, reason)
  local job_key = base .. 'job:' .. id
  redis.call('HSET', job_key, 'state', 'failed', 'error', reason, 'finished_at', now)
  redis.call('PEXPIRE', job_key, 86400000)
  redis.call('ZADD', failed, now + 86400000, id)
  emit(events, maxlen, 'event', 'failed', 'id', id, 'error', reason)
end

local leased = 0
local stopped_early = false  -- by a suspect or the visit bound: others may claim on

-- Lease one popped id; returns false when claiming must stop here (a
-- suspect met after other jobs was put back, or a suspect was leased).
local function take(id, score, from)
  local job_key = base .. 'job:' .. id
  local f = redis.call('HMGET', job_key, unpack(FIELDS))
  local attempts, stalls = tonumber(f[4] or '0'), tonumber(f[6] or '0')
  if not f[1] then
    fail_corrupt(id, 'job record missing')
    return true
  elseif not KNOWN_STATES[f[1]] then
    fail_corrupt(id, "corrupt record: unknown state '" .. f[1] .. "'")
    return true
  elseif f[1] ~= 'waiting' then
    return true  -- a stale index entry
  elseif not (attempts and stalls) then
    fail_corrupt(id, 'corrupt record: attempts or stalls is not a number')
    return true
  end
  if stalls > 0 and (leased > 0 or not alone) then
    redis.call('ZADD', from, score, id)  -- a suspect runs alone, in the next claim
    out[3] = 1
    return false
  end
  attempts = attempts + 1
  redis.call('HSET', job_key, 'attempts', attempts, 'state', 'active', 'token', token,
             'worker', worker, 'started_at', now)
  redis.call('ZADD', active, now + lease, id)
  emit(events, maxlen, 'event', 'active', 'id', id, 'attempt', attempts, 'worker', worker)
  if f[15] and f[15] ~= '' then
    redis.call('HINCRBY', gactive, f[15], 1)
  end
  out[#out + 1] = id
  f[3] = read_data(job_key, f[3], f[16], f[17])
  f[4] = attempts
  for k = 2, RETURNED do
    out[#out + 1] = f[k] or DEFAULTED[k] or false  -- false: a nil reply, kept in place
  end
  leased = leased + 1
  return stalls == 0
end

-- No groups in play: take jobs in ready order, `n` at most.
local function claim_in_order(n)
  local popped = redis.call('ZPOPMIN', ready, n)
  for i = 1, #popped, 2 do
    if not take(popped[i], popped[i + 1], ready) then
      stopped_early = true
      for k = i + 2, #popped, 2 do
        redis.call('ZADD', ready, popped[k + 1], popped[k])
      end
      return
    end
  end
end

local function pop_one(key)
  local popped = redis.call('ZPOPMIN', key, 1)
  if #popped == 0 then return nil end
  return popped
end

-- Groups in play: one job per turn from the group served least recently.
local function claim_round_robin(n)
  local visits = 0
  while leased < n and visits < n + 32 do
    visits = visits + 1
    local head = redis.call('ZRANGE', groups, 0, 0, 'WITHSCORES')
    local ungrouped_ready = redis.call('ZCARD', ready) > 0
    if #head == 0 and not ungrouped_ready then return end
    if ungrouped_ready and (#head == 0 or num(limits[8], 0) <= tonumber(head[2])) then
      local popped = pop_one(ready)
      local served = redis.call('HINCRBY', meta, 'rr', 1)
      redis.call('HSET', meta, 'rr_ungrouped', served)
      limits[8] = served
      if not take(popped[1], popped[2], ready) then
        stopped_early = true
        return
      end
    else
      local group = head[1]
      local until_ms = group_hold(group)
      if until_ms then
        hold(group, until_ms)
        if until_ms ~= INF then due_at(until_ms) end
      else
        local key = group_ready(group)
        local popped = pop_one(key)
        if not popped then
          redis.call('ZREM', groups, group)
        else
          local before = leased
          local go_on = take(popped[1], popped[2], key)
          if leased > before then
            local conf = redis.call('HMGET', base .. 'gconf:' .. group, 'rate', 'window')
            if tonumber(conf[1]) or tonumber(limits[6]) then
              local wkey = window(base .. 'grate:' .. group .. ':', num(conf[2], num(limits[7], 1000)))
              count_in_window(wkey, num(conf[2], num(limits[7], 1000)), 1)
            end
          end
          if redis.call('ZCARD', key) > 0 then
            redis.call('ZADD', groups, redis.call('HINCRBY', meta, 'rr', 1), group)
          else
            redis.call('ZREM', groups, group)
          end
          if not go_on then
            stopped_early = true
            return
          end
        end
      end
    end
  end
  stopped_early = visits >= n + 32
end

local function earliest(key)
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if #first > 0 and first[2] ~= 'inf' then due_at(tonumber(first[2])) end
end

if limits[1] ~= '1' then
  promote()
  local n = queue_allowance()
  if n > 0 then
    if redis.call('EXISTS', groups) == 0 then
      claim_in_order(n)
    else
      claim_round_robin(n)
    end
    if leased > 0 and tonumber(limits[3]) then
      local window_ms = num(limits[4], 1000)
      count_in_window(window(base .. 'rate:', window_ms), window_ms, leased)
    end
  end
  -- Wake another idle worker only if it could claim something now: not when
  -- a limit or held-back groups are what stopped this call.
  local more = redis.call('ZCARD', ready) > 0 or redis.call('EXISTS', groups) == 1
  if more and n >= count and (leased >= n or stopped_early) then
    wake(marker)
  end
end
earliest(scheduled)
earliest(gwait)
out[2] = next_due or -1
return out

-- claim: promote due delayed jobs, then lease up to `count` ready jobs.
--
-- KEYS[1] base        `<prefix>:{<queue>}:`
-- KEYS[2] meta        hash: `paused` = '1' stops claims
-- KEYS[3] ready       zset: priority * 2^31 + seq
-- KEYS[4] scheduled   zset: due ms
-- KEYS[5] active      zset: lease deadline ms
-- KEYS[6] marker      zset: wake-up marker
-- KEYS[7] events      stream
-- KEYS[8] failed      zset: failed ids by expiry ms
--
-- ARGV[1] worker id
-- ARGV[2] count       at most this many jobs
-- ARGV[3] lease_ms    lease length
-- ARGV[4] token       random fencing token for this claim (the worker's writes must match)
-- ARGV[5] promote     at most this many due delayed jobs promoted per call
-- ARGV[6] events stream max length
--
-- Returns: {now_ms, next_due_ms | -1, then 13 fields per claimed job:
--   id, task, data, attempts, failures, stalls, max_failures, max_stalls,
--   min_backoff, max_backoff, timeout, priority, created_at}
--   next_due_ms is the earliest scheduled due time, so an idle worker can
--   block until then instead of polling.
--
-- Effects: promoted jobs move scheduled -> ready (keeping their enqueue
-- order); claimed jobs move ready -> active with state, token, worker,
-- started_at and attempts + 1; an `active` event per job; when jobs remain
-- ready, the marker is set so another idle worker wakes.
-- An id in `ready` whose record is missing, has an unknown state or
-- non-numeric counters is recorded as failed with a reason; one whose record
-- is in another known state (a stale index entry) is dropped.
-- A job that has stalled before (its worker died with it) is claimed alone:
-- if it is a poison job that kills workers, it takes no batch-mates down. The
-- jobs popped after it go back to `ready` with their scores.
-- Complexity: O((promote + count) * log N).

-- @include common

local meta, ready, scheduled, active = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local marker, events, failed = KEYS[6], KEYS[7], KEYS[8]
local worker, count, lease, token = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local promote_limit, maxlen = tonumber(ARGV[5]), ARGV[6]
local now = now_ms()

local function next_due()
  local first = redis.call('ZRANGE', scheduled, 0, 0, 'WITHSCORES')
  if #first == 0 then return -1 end
  return tonumber(first[2])
end

-- Jobs due at the same moment keep their enqueue order: the ready score
-- comes from the sequence number given at enqueue, not from promotion.
local function promote()
  local due = redis.call('ZRANGEBYSCORE', scheduled, '-inf', now, 'LIMIT', 0, promote_limit)
  for _, id in ipairs(due) do
    redis.call('ZREM', scheduled, id)
    local job_key = base .. 'job:' .. id
    local f = redis.call('HMGET', job_key, 'priority', 'seq')
    if f[2] then
      redis.call('HSET', job_key, 'state', 'waiting')
      redis.call('ZADD', ready, ready_score(f[1], f[2]), id)
    end
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

local KNOWN_STATES = {waiting = true, delayed = true, active = true, completed = true,
                      failed = true, blocked = true, waiting_children = true}

local FIELDS = {'state', 'task', 'data', 'attempts', 'failures', 'stalls', 'max_failures',
                'max_stalls', 'min_backoff', 'max_backoff', 'timeout', 'priority', 'created_at'}

local out = {now, -1}
if redis.call('HGET', meta, 'paused') == '1' then
  out[2] = next_due()
  return out
end
local function lease_job(id, job_key, f, attempts)
  redis.call('HSET', job_key, 'attempts', attempts, 'state', 'active', 'token', token,
             'worker', worker, 'started_at', now)
  redis.call('ZADD', active, now + lease, id)
  emit(events, maxlen, 'event', 'active', 'id', id, 'attempt', attempts, 'worker', worker)
  out[#out + 1] = id
  f[4] = attempts
  for k = 2, #FIELDS do
    out[#out + 1] = f[k]
  end
end

local function put_back(popped, from)
  for k = from, #popped, 2 do
    redis.call('ZADD', ready, popped[k + 1], popped[k])
  end
end

promote()
local popped = redis.call('ZPOPMIN', ready, count)
for i = 1, #popped, 2 do
  local id = popped[i]
  local job_key = base .. 'job:' .. id
  local f = redis.call('HMGET', job_key, unpack(FIELDS))
  local attempts, stalls = tonumber(f[4] or '0'), tonumber(f[6] or '0')
  if not f[1] then
    fail_corrupt(id, 'job record missing')
  elseif not KNOWN_STATES[f[1]] then
    fail_corrupt(id, "corrupt record: unknown state '" .. f[1] .. "'")
  elseif f[1] == 'waiting' and not (attempts and stalls) then
    fail_corrupt(id, 'corrupt record: attempts or stalls is not a number')
  elseif f[1] == 'waiting' then
    if stalls > 0 and #out > 2 then
      put_back(popped, i)  -- a suspect runs alone, in the next claim
      break
    end
    lease_job(id, job_key, f, attempts + 1)
    if stalls > 0 then
      put_back(popped, i + 2)
      break
    end
  end
end
if redis.call('ZCARD', ready) > 0 then
  wake(marker)
end
out[2] = next_due()
return out

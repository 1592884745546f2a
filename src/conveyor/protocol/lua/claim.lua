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
-- An id in `ready` whose record is missing is recorded as failed with a reason;
-- one whose record is in another state (a stale index entry) is dropped.
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

-- A ready id without a record cannot run; keep a visible trace of it.
local function fail_orphan(id)
  local job_key = base .. 'job:' .. id
  redis.call('HSET', job_key, 'state', 'failed', 'error', 'job record missing',
             'finished_at', now)
  redis.call('PEXPIRE', job_key, 86400000)
  redis.call('ZADD', failed, now + 86400000, id)
  emit(events, maxlen, 'event', 'failed', 'id', id, 'error', 'job record missing')
end

local FIELDS = {'state', 'task', 'data', 'attempts', 'failures', 'stalls', 'max_failures',
                'max_stalls', 'min_backoff', 'max_backoff', 'timeout', 'priority', 'created_at'}

local out = {now, -1}
if redis.call('HGET', meta, 'paused') == '1' then
  out[2] = next_due()
  return out
end
promote()
local popped = redis.call('ZPOPMIN', ready, count)
for i = 1, #popped, 2 do
  local id = popped[i]
  local job_key = base .. 'job:' .. id
  local f = redis.call('HMGET', job_key, unpack(FIELDS))
  if not f[1] then
    fail_orphan(id)
  elseif f[1] == 'waiting' then
    local attempts = redis.call('HINCRBY', job_key, 'attempts', 1)
    redis.call('HSET', job_key, 'state', 'active', 'token', token, 'worker', worker,
               'started_at', now)
    redis.call('ZADD', active, now + lease, id)
    emit(events, maxlen, 'event', 'active', 'id', id, 'attempt', attempts, 'worker', worker)
    out[#out + 1] = id
    f[4] = attempts
    for k = 2, #FIELDS do
      out[#out + 1] = f[k]
    end
  end
end
if redis.call('ZCARD', ready) > 0 then
  wake(marker)
end
out[2] = next_due()
return out

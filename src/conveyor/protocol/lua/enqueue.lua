-- enqueue: create jobs, or apply upsert rules to jobs that already exist.
-- One call takes a batch of jobs, so single and bulk enqueue share it.
--
-- KEYS[1] base        `<prefix>:{<queue>}:` — job:<id>, blocked:<id> derive from it
-- KEYS[2] meta        hash: seq / lifo_seq counters
-- KEYS[3] ready       zset: priority * 2^31 + seq
-- KEYS[4] scheduled   zset: due ms
-- KEYS[5] marker      zset: wake-up marker for blocked workers
-- KEYS[6] events      stream
-- KEYS[7] blocked     zset: ids with a blocked twin (score: enqueue ms)
-- KEYS[8] completed   zset: finished ids by expiry ms
-- KEYS[9] failed      zset: failed ids by expiry ms
--
-- ARGV[1] events stream max length (approximate)
-- ARGV[2] F, the number of ARGV entries per job (23)
-- ARGV[3 ..] per job, F entries:
--   id, task, data, priority, delay_ms|'', run_at_ms|'', max_failures,
--   max_stalls, min_backoff_ms, max_backoff_ms, timeout_ms, result_ttl_ms,
--   lifo 0|1, group|'', u_data, u_run_at (1|0|later|earlier),
--   u_max_failures, u_max_stalls, u_min_backoff, u_max_backoff, u_reset,
--   req (a random request id: an enqueue re-sent after a lost reply carries
--   the same one and changes nothing, outcome 'exists'), idx (property
--   index entries, "field:value" lines, or '': the job is listed in
--   idx:<field>:<value> while its record lives)
--
-- Returns, per job in order: outcome, state
--   outcome: 'created' | 'updated' (waiting/delayed job upserted)
--            | 'blocked' (job active: stored as its blocked twin)
--            | 'exists' (job finished and still retained, or this very call
--              was applied before — a re-send: nothing changed)
--   state: the job's state after the call
--
-- Effects: job hash written field by field; ready or scheduled index; one
-- `created`/`updated`/`blocked` event per job; the wake marker.
-- Complexity: O(batch * log N).

-- @include common
-- @include upsert
-- @include finish
-- @include create

local meta, ready, scheduled, marker = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local events, blocked_index = KEYS[6], KEYS[7]
local completed, failed = KEYS[8], KEYS[9]
local Q = {meta = meta, ready = ready, scheduled = scheduled, marker = marker, events = events,
           completed = completed, failed = failed}
local maxlen = ARGV[1]
local F = tonumber(ARGV[2])
local now = now_ms()

local function parse(i)
  local due = now
  if ARGV[i + 5] ~= '' then
    due = now + tonumber(ARGV[i + 5])
  elseif ARGV[i + 6] ~= '' then
    due = tonumber(ARGV[i + 6])
  end
  return {
    id = ARGV[i + 1], task = ARGV[i + 2], data = ARGV[i + 3], priority = ARGV[i + 4],
    run_at = due, max_failures = ARGV[i + 7], max_stalls = ARGV[i + 8],
    min_backoff = ARGV[i + 9], max_backoff = ARGV[i + 10], timeout = ARGV[i + 11],
    result_ttl = ARGV[i + 12], lifo = ARGV[i + 13], group = ARGV[i + 14],
    u_data = ARGV[i + 15], u_run_at = ARGV[i + 16], u_max_failures = ARGV[i + 17],
    u_max_stalls = ARGV[i + 18], u_min_backoff = ARGV[i + 19], u_max_backoff = ARGV[i + 20],
    u_reset = ARGV[i + 21], req = ARGV[i + 22], idx = ARGV[i + 23],
  }
end

-- Re-index a waiting or delayed job whose run_at an upsert may have moved.
local function replace(job_key, j, state)
  local due = upsert(job_key, j)
  if state == 'waiting' and due <= now then
    return state
  end
  unready(ready, j.id, redis.call('HGET', job_key, 'group'))
  redis.call('ZREM', scheduled, j.id)
  return place(job_key, j.id, due, now, ready, scheduled, marker)
end

local function block(j)
  local twin = base .. 'blocked:' .. j.id
  if redis.call('EXISTS', twin) == 1 then
    upsert(twin, j)
    redis.call('HSET', twin, 'req', j.req)
  else
    local fields = job_fields(j, 'blocked', now, meta)
    for _, flag in ipairs(UPSERT_FLAGS) do
      fields[#fields + 1] = flag
      fields[#fields + 1] = j[flag]
    end
    redis.call('HSET', twin, unpack(fields))
    redis.call('ZADD', blocked_index, now, j.id)
  end
  emit(events, maxlen, 'event', 'blocked', 'id', j.id)
end

-- A re-send of an enqueue that was already applied (a reply lost on the
-- way, then retried) carries the same request id: it must change nothing.
local function replayed(job_key, j)
  return redis.call('HGET', job_key, 'req') == j.req
      or redis.call('HGET', base .. 'blocked:' .. j.id, 'req') == j.req
end

SEQ_BLOCK = math.max(1, math.floor((#ARGV - 2) / F))

local out = {}
for i = 3, #ARGV, F do
  local j = parse(i - 1)
  local job_key = base .. 'job:' .. j.id
  local state = redis.call('HGET', job_key, 'state')
  local outcome
  if state and j.req ~= '' and replayed(job_key, j) then
    outcome = 'exists'
  elseif not state then
    outcome, state = 'created', create_job(job_key, j, now, Q, maxlen)
  elseif state == 'waiting' or state == 'delayed' then
    outcome, state = 'updated', replace(job_key, j, state)
    redis.call('HSET', job_key, 'req', j.req)
    emit(events, maxlen, 'event', 'updated', 'id', j.id, 'state', state)
  elseif state == 'active' then
    block(j)
    outcome = 'blocked'
  else
    outcome = 'exists'
  end
  out[#out + 1] = outcome
  out[#out + 1] = state
end
return out

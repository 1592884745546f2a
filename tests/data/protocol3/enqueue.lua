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
-- ARGV[2] F, the number of ARGV entries per job (6)
-- ARGV[3 ..] per job, F entries:
--   id, task, data,
--   req (a random request id: an enqueue re-sent after a lost reply carries
--   the same one and changes nothing, outcome 'exists'),
--   idx (property index entries, "field:value" lines, or '': the job is
--   listed in idx:<field>:<value> while its record lives),
--   opts: '' or "name=value" lines, only for what differs from the default:
--   priority (1000), delay (ms), run_at (ms), max_failures (3), max_stalls
--   (3), min_backoff (1000 ms), max_backoff (300000 ms), timeout (300000
--   ms), result_ttl (86400000 ms), lifo (0), group (''), u_data (1),
--   u_run_at (1|0|later|earlier; 1), u_max_failures, u_max_stalls,
--   u_min_backoff, u_max_backoff (0), u_reset (1), given (1: the caller
--   chose the id; without it the producer generated a fresh random one)
--
-- Returns, per job in order: outcome, state
--   outcome: 'created' | 'updated' (waiting/delayed job upserted)
--            | 'blocked' (job active: stored as its blocked twin)
--            | 'exists' (job finished and still retained, or this very call
--              was applied before — a re-send: nothing changed)
--   state: the job's state after the call
--
-- Effects: job hash written field by field; ready or scheduled index; one
-- `created`/`updated`/`blocked` event per job; the wake marker. (The first
-- send of new jobs without options or index entries goes to enqueue_new.)
-- Complexity: O(batch * log N).

-- @include common
-- @include record
-- @include upsert
-- @include place
-- @include create

local meta, ready, scheduled, marker = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local events, blocked_index = KEYS[6], KEYS[7]
local completed, failed = KEYS[8], KEYS[9]
local Q = {meta = meta, ready = ready, scheduled = scheduled, marker = marker, events = events,
           completed = completed, failed = failed}
local maxlen = ARGV[1]
local F = tonumber(ARGV[2])
local now = now_ms()

-- The options an enqueue may set (opts), and the upsert rules' defaults.
local OPTIONS = {priority = true, delay = true, run_at = true, max_failures = true,
                 max_stalls = true, min_backoff = true, max_backoff = true, timeout = true,
                 result_ttl = true, lifo = true, group = true, u_data = true, u_run_at = true,
                 u_max_failures = true, u_max_stalls = true, u_min_backoff = true,
                 u_max_backoff = true, u_reset = true, given = true}
local RULES = {u_data = '1', u_run_at = '1', u_max_failures = '0', u_max_stalls = '0',
               u_min_backoff = '0', u_max_backoff = '0', u_reset = '1'}

local function parse(i)
  local j = {id = ARGV[i + 1], task = ARGV[i + 2], data = ARGV[i + 3], req = ARGV[i + 4],
             idx = ARGV[i + 5]}
  local opts = ARGV[i + 6]
  if opts == '' then
    j.fresh, j.plain, j.run_at = true, true, now
    return j
  end
  for name, value in string.gmatch(opts, '([%w_]+)=([^\n]*)') do
    if OPTIONS[name] then j[name] = value end
  end
  j.fresh = j.given ~= '1'
  if j.delay then
    j.run_at = now + tonumber(j.delay)
  else
    j.run_at = tonumber(j.run_at) or now
  end
  return j
end

-- The upsert rules this enqueue did not set take their defaults.
local function with_rules(j)
  for flag, default in pairs(RULES) do
    if j[flag] == nil then j[flag] = default end
  end
  return j
end

-- Re-index a waiting or delayed job whose run_at an upsert may have moved.
local function replace(job_key, j, state)
  local due = upsert(job_key, with_rules(j))
  if state == 'waiting' and due <= now then
    return state
  end
  unready(ready, j.id, redis.call('HGET', job_key, 'group'))
  redis.call('ZREM', scheduled, j.id)
  return place(job_key, j.id, due, now, ready, scheduled, marker)
end

local function block(j)
  with_rules(j)
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

-- New waiting jobs enter ready in one ZADD per up to 200 jobs, not one each.
-- Pending entries are added before anything else may look at ready (an
-- upsert of an id created earlier in this call) and at the end.
Q.pending = {}
local function add_pending()
  if #Q.pending > 0 then
    redis.call('ZADD', ready, unpack(Q.pending))
    Q.pending = {}
  end
end

-- Ids the producer generated (fresh) are new unless this very call was
-- applied before (a re-send): when the first fresh id of the call is not
-- there, the others are not either, and are not looked up.
local fresh_are_new = false

local out = {}
for i = 3, #ARGV, F do
  local j = parse(i - 1)
  local job_key = base .. 'job:' .. j.id
  local state = false
  if not (j.fresh and fresh_are_new) then
    state = redis.call('HGET', job_key, 'state')
    if j.fresh then fresh_are_new = not state end
  end
  if state or #Q.pending >= 400 then
    add_pending()
  end
  local outcome
  if state and (j.fresh or (j.req ~= '' and replayed(job_key, j))) then
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
add_pending()
return out

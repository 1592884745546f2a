-- enqueue_skip: create jobs whose ids the caller chose, each one unless a
-- job with its id already exists (in any state: then it is left alone). For
-- bulk producers that re-send whole batches (a retried Spark task): a re-send
-- creates nothing twice and never runs a finished job again, with no look-up
-- round trip before it and no request id. Only the record options travel
-- with a job; delays, groups, LIFO, headers and index entries go to enqueue.
--
-- KEYS[1] base        `<prefix>:{<queue>}:` — job:<id> derives from it
-- KEYS[2] meta        hash: the seq counter
-- KEYS[3] ready       zset: priority * 2^31 + seq
-- KEYS[4] marker      zset: wake-up marker for blocked workers
-- KEYS[5] events      stream
-- KEYS[6] completed   zset: a created id's stale entry (an expired record's) is removed
-- KEYS[7] failed      zset: likewise
--
-- ARGV[1] events stream max length (approximate)
-- ARGV[2 ..] per job, 4 entries: id, task, data, opts — opts is '' or
--   "name=value" lines of the record options that differ from their
--   default: priority, max_failures, max_stalls, min_backoff, max_backoff,
--   timeout, result_ttl (non-negative integers, ms for times).
--
-- Returns an array: the number of jobs created, then for each job not
-- created (outcome `exists`) its position in the call (1-based) and the
-- state of the job that stands for its id: the record's `state` ('' when the
-- record has none), or `waiting` for an id created earlier in the same call.
-- All created: the array is just {count}.
-- A malformed call (ARGV not 1 + 4k entries, an empty or over-long id or
-- task, an unknown option or a value that is not a non-negative integer, a
-- priority over 2^21) is refused with an error reply starting
-- `ERR invalid call`, before anything is written.
--
-- Effects: per created job, in order, what enqueue writes for a plain job
-- with a given id (docs/protocol.md §6.1): the record (`state` waiting,
-- `task`, `data` in pieces, `seq`, `created_at`, the options sent; no
-- `req`), its ready entry; its id removed from completed and failed; one
-- `created` event naming the call's created jobs (§11); the wake marker once.
-- An existing id (or one earlier in the same call): nothing, not named.
-- created_at is the millisecond part of that event's id; the stream is trimmed only when the call's
-- sequence numbers pass a multiple of 64, as enqueue_new does.
-- Complexity: O(batch * log N).

-- @include common
-- @include record

local HALF = 1073741824  -- as in `create`: FIFO sequence numbers count up from 2^30
local MAX_PRIORITY = 2097152  -- 2^21, as in §4.1: every ready score stays exact (common)
local ARITY = 4
local n = (#ARGV - 1) / ARITY

local function refuse(what)
  return redis.error_reply('ERR invalid call of enqueue_skip: ' .. what)
end

-- An opts text parsed (once per distinct text of a call): the HSET arguments
-- of the options that differ from their default and the job's ready band
-- (priority * 2^31); nil and the reason when it is malformed.
local function parse_opts(opts)
  local fields, priority = {}, RECORD_DEFAULTS.priority
  for line in string.gmatch(opts, '[^\n]+') do
    local name, value = string.match(line, '^([%w_]+)=(%d+)$')
    local default = name and name ~= 'attempts' and name ~= 'failures' and name ~= 'stalls'
        and RECORD_DEFAULTS[name]
    if not default then return nil, 'option line ' .. line end
    value = tonumber(value)
    if name == 'priority' then
      if value > MAX_PRIORITY then return nil, 'priority ' .. value end
      priority = value
    end
    if value ~= default then
      fields[#fields + 1] = name
      fields[#fields + 1] = int_text(value)
    end
  end
  return {fields = fields, band = ready_score(priority, 0)}
end

if n < 1 or n ~= math.floor(n) then
  return refuse('ARGV must be maxlen and 4 entries per job, got ' .. #ARGV)
end

-- Pass 1, reads only: check every job and find those to create.
local templates = {}  -- opts text -> parsed
local seen = {}  -- id -> the state of its job, for ids earlier in this call
local new, new_keys = {}, {}  -- ARGV positions and record keys of the jobs to create
local reply = {0}  -- the count, then position and state of each job not created
for i = 2, #ARGV, ARITY do
  local id, task, opts = ARGV[i], ARGV[i + 1], ARGV[i + 3]
  if #id == 0 or #id > 256 then return refuse('job id of ' .. #id .. ' bytes') end
  if #task == 0 or #task > 256 then return refuse('task name of ' .. #task .. ' bytes') end
  if not templates[opts] then
    local parsed, why = parse_opts(opts)
    if not parsed then return refuse(why) end
    templates[opts] = parsed
  end
  local state = seen[id]
  if not state then
    local job_key = base .. 'job:' .. id
    if redis.call('EXISTS', job_key) == 0 then
      new[#new + 1] = i
      new_keys[#new_keys + 1] = job_key
      seen[id] = 'waiting'
    else
      state = redis.call('HGET', job_key, 'state') or ''
      seen[id] = state
    end
  end
  if state then
    reply[#reply + 1] = (i - 2) / ARITY + 1
    reply[#reply + 1] = state
  end
end
local count = #new
if count == 0 then return reply end
reply[1] = count

-- Pass 2: write. (Written out: a loop or a call per job costs Redis time on
-- every job.)
local last = redis.call('HINCRBY', KEYS[2], 'seq', int_text(count))
-- The call's one `created` entry (§11); the millisecond part of its id is every job's
-- created_at.
local created = {}
for k = 1, count do created[k] = ARGV[new[k]] end
local event_id = add_for_jobs(KEYS[5], 'created', created, 'state', 'waiting')
local now = string.sub(event_id, 1, string.find(event_id, '-', 1, true) - 1)
local ready, ids = {}, {}
for k = 1, count do
  local i = new[k]
  local id, data = ARGV[i], ARGV[i + 2]
  local template = templates[ARGV[i + 3]]
  local seq = HALF + ((last - count + k) % HALF)
  -- integers go to redis.call as text: Redis would format a Lua number with
  -- snprintf("%.17g"), a large part of the call's time (common, int_text)
  local seq_text = string.format('%d', seq)
  local options = template.fields
  if #data <= 64 then  -- one data field (put_data would store it whole)
    redis.call('HSET', new_keys[k], 'state', 'waiting', 'task', ARGV[i + 1], 'seq', seq_text,
               'created_at', now, 'data', data, unpack(options))
  else
    local fields = {'state', 'waiting', 'task', ARGV[i + 1], 'seq', seq_text, 'created_at', now}
    put_data(fields, data)
    for _, value in ipairs(options) do fields[#fields + 1] = value end
    redis.call('HSET', new_keys[k], unpack(fields))
  end
  ready[#ready + 1] = string.format('%d', template.band + seq)
  ready[#ready + 1] = id
  ids[#ids + 1] = id
  if #ids >= 200 then  -- unpack takes a bounded number of values
    redis.call('ZADD', KEYS[3], unpack(ready))
    redis.call('ZREM', KEYS[6], unpack(ids))
    redis.call('ZREM', KEYS[7], unpack(ids))
    ready, ids = {}, {}
  end
end
if #ids > 0 then
  redis.call('ZADD', KEYS[3], unpack(ready))
  redis.call('ZREM', KEYS[6], unpack(ids))
  redis.call('ZREM', KEYS[7], unpack(ids))
end
wake(KEYS[4])
if last % 64 < count then trim(KEYS[5], ARGV[1]) end
return reply

-- enqueue_new: the first send of jobs whose ids the producer has just
-- generated, with no options and no index entries. It writes what enqueue
-- writes for such jobs (docs/protocol.md §6.1, "First sends"), without
-- looking anything up: the ids are fresh, so none of them exists.
--
-- KEYS[1] base        `<prefix>:{<queue>}:` — job:<id> derives from it
-- KEYS[2] meta        hash: the seq counter
-- KEYS[3] ready       zset: priority * 2^31 + seq
-- KEYS[4] marker      zset: wake-up marker for blocked workers
-- KEYS[5] events      stream
--
-- ARGV[1] events stream max length (approximate)
-- ARGV[2 ..] per job, 3 entries: id, task, data
--
-- Returns the number of jobs created (each one's outcome is `created`, its
-- state `waiting`).
--
-- Effects: per job, the record (`state`, `task`, `data` in pieces, `seq`,
-- `created_at`) and its ready entry at the default priority; one `created`
-- event naming the call's jobs (§11); the wake marker. created_at is the
-- millisecond part of that event's id (XADD reads the server clock: no TIME). The stream is
-- trimmed only when the call's sequence numbers pass a multiple of 64
-- (trimming must read the readers' positions; until then the stream may
-- pass maxlen by up to 64).
-- A producer MUST NOT send this again after a lost reply: a re-send goes to
-- enqueue, which reports the jobs that got in as `exists`.
-- Complexity: O(batch * log N).

local HALF = 1073741824  -- as in `create`: FIFO sequence numbers count up from 2^30
local DEFAULT_BAND = 1000 * 2147483648  -- ready_score(nil, 0): the default priority
local base = KEYS[1]  -- (common, included below, declares it again)
local n = (#ARGV - 1) / 3
local trim_due = nil  -- nil until the jobs are written

-- One job with data of at most 64 bytes: the single enqueue, written out
-- with no table, closure or loop, and with the globals it uses held in
-- locals (each costs Redis time on every call). Integers go to redis.call as
-- text: Redis formats a Lua number with snprintf("%.17g"), a large part of
-- this script's time (common.lua, int_text); string.format('%d') is the
-- cheapest way to text that Lua has.
if n == 1 and #ARGV[4] <= 64 then
  local call, format, K, A = redis.call, string.format, KEYS, ARGV
  local id = A[2]
  local last = call('HINCRBY', K[2], 'seq', '1')
  local seq = HALF + (last % HALF)
  local event_id = call('XADD', K[5], '*', 'event', 'created', 'id', id, 'state', 'waiting')
  call('HSET', base .. 'job:' .. id, 'state', 'waiting', 'task', A[3], 'seq', format('%d', seq),
       'created_at', string.match(event_id, '^%d+'), 'data', A[4])
  call('ZADD', K[3], format('%d', DEFAULT_BAND + seq), id)
  call('ZADD', K[4], '0', '0')  -- wake(marker)
  trim_due = last % 64 == 0
  if not trim_due then return 1 end
end

local function INT(n) return string.format('%d', n) end

-- Writes the jobs; `put(fields, data)`, when given, appends a job's data to
-- its HSET arguments (else the data is one field). Returns whether the
-- stream is due a trim.
local function create_all(put)
  local last = redis.call('HINCRBY', KEYS[2], 'seq', INT(n))
  local ready = {}
  -- The call's one `created` entry (§11): `id` for one job, else `ids`, space-separated.
  local event_id
  if n == 1 then
    event_id = redis.call('XADD', KEYS[5], '*', 'event', 'created', 'id', ARGV[2],
                          'state', 'waiting')
  else
    local ids = {}
    for k = 0, n - 1 do ids[k + 1] = ARGV[2 + 3 * k] end
    event_id = redis.call('XADD', KEYS[5], '*', 'event', 'created', 'ids',
                          table.concat(ids, ' '), 'state', 'waiting')
  end
  local now = string.sub(event_id, 1, string.find(event_id, '-', 1, true) - 1)  -- created_at
  for k = 0, n - 1 do
    local i = 2 + 3 * k
    local id = ARGV[i]
    local seq = INT(HALF + ((last - n + 1 + k) % HALF))
    local job_key = base .. 'job:' .. id
    if put then
      local fields = {'state', 'waiting', 'task', ARGV[i + 1], 'seq', seq, 'created_at', now}
      put(fields, ARGV[i + 2])
      redis.call('HSET', job_key, unpack(fields))
    else
      redis.call('HSET', job_key, 'state', 'waiting', 'task', ARGV[i + 1], 'seq', seq,
                 'created_at', now, 'data', ARGV[i + 2])
    end
    ready[#ready + 1] = INT(DEFAULT_BAND + seq)
    ready[#ready + 1] = id
    if #ready >= 400 then
      redis.call('ZADD', KEYS[3], unpack(ready))
      ready = {}
    end
  end
  if #ready > 0 then redis.call('ZADD', KEYS[3], unpack(ready)) end
  redis.call('ZADD', KEYS[4], '0', '0')  -- wake(marker)
  return last % 64 < n
end

-- Data of at most 64 bytes is one field (record's put_data would store it
-- whole): such a call runs before any include defines anything (a call pays
-- for every function its script defines).
if trim_due == nil then
  local long = false
  for i = 4, #ARGV, 3 do
    if #ARGV[i] > 64 then
      long = true
      break
    end
  end
  if not long then
    trim_due = create_all(nil)
    if not trim_due then return n end
  end
end

-- @include common

-- The jobs are written (one of the paths above): only the trim is left, and
-- record's top level (its tables and closures) is not run for it.
if trim_due ~= nil then
  if trim_due then trim(KEYS[5], ARGV[1]) end
  return n
end

-- @include record

if create_all(put_data) then trim(KEYS[5], ARGV[1]) end
return n

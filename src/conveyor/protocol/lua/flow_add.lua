-- flow_add: create the nodes of a flow that live in this queue (docs/protocol.md §14.3).
-- A producer writes a tree top-down: a parent, with its whole pending set,
-- before any of its children, so no child can settle before its parent exists.
--
-- KEYS[1] base        `<prefix>:{<queue>}:` — job:<id>, children:<id>, pending:<id> derive from it
-- KEYS[2] meta        hash: seq / lifo_seq counters
-- KEYS[3] ready       zset
-- KEYS[4] scheduled   zset: due ms
-- KEYS[5] marker      zset: wake-up marker
-- KEYS[6] events      stream
-- KEYS[7] completed   zset (a stale entry of a caller-chosen id is removed)
-- KEYS[8] failed      zset (idem)
-- KEYS[9] wchildren   zset: ids in waiting_children, by created_at
--
-- ARGV[1] events stream max length
-- ARGV[2] F, the number of ARGV entries per node (8)
-- ARGV[3 ..] per node, F entries:
--   id, task, data, idx, opts (as enqueue's; upsert flags are ignored),
--   parent (the parent's reference `<queue>/<id>`, or '' for a root),
--   on_fail ('' = fail | ignore | remove | continue),
--   children (the node's child references, one per line, or '' for a leaf)
--
-- Returns, per node in order: outcome, state
--   outcome: 'created' | 'exists' (the id exists with this parent: a
--            re-send, nothing changes) | 'conflict' (the id exists under
--            another parent or none: nothing changes for it, and the
--            parent is told the child failed, so it cannot wait for ever)
--
-- Effects: a leaf is created and placed as by enqueue (`created` event); a
-- node with children is created in state waiting_children, listed in
-- wchildren, its references in children:<id> (scored 1..n) and pending:<id>
-- (a `waiting_children` event with their number).
-- Complexity: O(nodes * log N + references).

-- @include common
-- @include record
-- @include upsert
-- @include place
-- @include finish
-- @include flow
-- @include create

local meta, ready, scheduled, marker = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local events, completed, failed, wchildren = KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local Q = {meta = meta, ready = ready, scheduled = scheduled, marker = marker, events = events,
           completed = completed, failed = failed}
local maxlen = ARGV[1]
local F = tonumber(ARGV[2])
local now = now_ms()

local OPTIONS = {priority = true, delay = true, run_at = true, max_failures = true,
                 max_stalls = true, min_backoff = true, max_backoff = true, timeout = true,
                 result_ttl = true, lifo = true, group = true, given = true}

local function parse(i)
  local j = {id = ARGV[i], task = ARGV[i + 1], data = ARGV[i + 2], idx = ARGV[i + 3],
             parent = ARGV[i + 5], on_fail = ARGV[i + 6], children = ARGV[i + 7]}
  for name, value in string.gmatch(ARGV[i + 4], '([%w_]+)=([^\n]*)') do
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

-- Unpacking is bounded (Lua's C stack): references go in chunks.
local CHUNK = 500

local function add_children(id, refs)
  local members, pending, n = {}, {}, 0
  local function flush()
    if #pending > 0 then
      redis.call('ZADD', base .. 'children:' .. id, unpack(members))
      redis.call('SADD', base .. 'pending:' .. id, unpack(pending))
      members, pending = {}, {}
    end
  end
  for ref in string.gmatch(refs, '[^\n]+') do
    n = n + 1
    members[#members + 1] = n
    members[#members + 1] = ref
    pending[#pending + 1] = ref
    if #pending == CHUNK then flush() end
  end
  flush()
  return n
end

local function create_parent(job_key, j)
  local fields = job_fields(j, 'waiting_children', now, meta)
  local n = add_children(j.id, j.children)
  fields[#fields + 1] = 'children'
  fields[#fields + 1] = n
  redis.call('HSET', job_key, unpack(fields))
  if j.idx and j.idx ~= '' then
    for line in string.gmatch(j.idx, '[^\n]+') do
      redis.call('ZADD', base .. 'idx:' .. line, now, j.id)
    end
  end
  if not j.fresh then
    redis.call('ZREM', completed, j.id)
    redis.call('ZREM', failed, j.id)
  end
  redis.call('ZADD', wchildren, now, j.id)
  emit(events, maxlen, 'event', 'waiting_children', 'id', j.id, 'children', n)
  return 'waiting_children'
end

SEQ_BLOCK = math.max(1, math.floor((#ARGV - 2) / F))

local out = {}
for i = 3, #ARGV, F do
  local j = parse(i)
  local job_key = base .. 'job:' .. j.id
  local found = redis.call('HMGET', job_key, 'state', 'parent')
  local outcome, state
  if found[1] then
    outcome, state = 'exists', found[1]
    if (found[2] or '') ~= j.parent then
      outcome = 'conflict'
      if j.parent ~= '' then
        hand_off(j.parent, flow_queue() .. '/' .. j.id, 'failed',
                 'FlowConflictError: job id ' .. j.id .. ' is already in use', j.on_fail, now,
                 maxlen)
      end
    end
  elseif j.children ~= '' then
    outcome, state = 'created', create_parent(job_key, j)
  else
    outcome, state = 'created', create_job(job_key, j, now, Q, maxlen)
  end
  out[#out + 1] = outcome
  out[#out + 1] = state
end
return out

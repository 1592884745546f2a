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
--   id, task, data, idx, opts (as enqueue's: priority, delay, run_at,
--   max_failures, max_stalls, min_backoff, max_backoff, timeout, result_ttl,
--   lifo, group, given, headers, expire_in, ckeys; on a root also dedup,
--   dedup_mode (simple | throttle; any other: simple) and dedup_ttl; the
--   upsert flags, and dedup on a node with a parent, are ignored),
--   parent (the parent's reference `<queue>/<id>`, or '' for a root),
--   on_fail ('' = fail | ignore | remove | continue),
--   children (the node's child references, one per line, or '' for a leaf)
--
-- Returns, per node in order: outcome, state; then, for each root that was
--   deduplicated, its position in the call (1-based) and the standing job's id
--   outcome: 'created' | 'exists' (the id exists with this parent: a
--            re-send, nothing changes) | 'conflict' (the id exists under
--            another parent or none: nothing changes for it, and the
--            parent is told the child failed, so it cannot wait for ever)
--            | 'deduplicated' (a root whose dedup key stands for another
--            job, §16.3: nothing written; state: that job's, '' if gone)
--            | 'skipped' (its parent, earlier in this call, is not open:
--            not looked at, nothing written; state '')
--   A node is *open* when it was created, or exists with this parent in
--   state waiting_children (a re-send completing the tree); the nodes under
--   a node that is not open are skipped.
--
-- Effects: a leaf is created and placed as by enqueue (`created` event); a
-- node with children is created in state waiting_children, listed in
-- wchildren, its references in children:<id> (scored 1..n) and pending:<id>
-- (a `waiting_children` event with their number). A created root with a
-- dedup key stands for it (dedup:<key>, §16.3); a deduplicated one writes
-- the `deduplicated` event. A conflict with a parent: a failed hand-off.
-- Complexity: O(nodes * log N + references).

-- @include common
-- @include record
-- @include upsert
-- @include place
-- @include finish
-- @include counts
-- @include flow
-- @include create
-- @include dedup

local meta, ready, scheduled, marker = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local events, completed, failed, wchildren = KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local Q = {meta = meta, ready = ready, scheduled = scheduled, marker = marker, events = events,
           completed = completed, failed = failed}
local maxlen = ARGV[1]
local F = tonumber(ARGV[2])
local now = now_ms()

local OPTIONS = {priority = true, delay = true, run_at = true, max_failures = true,
                 max_stalls = true, min_backoff = true, max_backoff = true, timeout = true,
                 result_ttl = true, lifo = true, group = true, given = true, headers = true,
                 expire_in = true, ckeys = true, dedup = true, dedup_mode = true,
                 dedup_ttl = true}

local function parse(i)
  local j = {id = ARGV[i], task = ARGV[i + 1], data = ARGV[i + 2], idx = ARGV[i + 3],
             parent = ARGV[i + 5], on_fail = ARGV[i + 6], children = ARGV[i + 7]}
  for name, value in string.gmatch(ARGV[i + 4], '([%w_]+)=([^\n]*)') do
    if OPTIONS[name] then j[name] = value end
  end
  j.fresh = j.given ~= '1'
  if j.expire_in then  -- expire if not started (§16.2): a deadline from now
    j.expires_at = now + (tonumber(j.expire_in) or 0)
  end
  if j.parent ~= '' then
    j.dedup = nil  -- only a root stands for a dedup key
  elseif j.dedup and j.dedup_mode ~= 'throttle' then
    j.dedup_mode = 'simple'
  end
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

-- Writes node `j` (not looked at yet); returns outcome, state, and the
-- standing job's id of a deduplicated root.
local function add(j)
  local job_key = base .. 'job:' .. j.id
  local found = redis.call('HMGET', job_key, 'state', 'parent')
  if found[1] then
    if (found[2] or '') == j.parent then
      return 'exists', found[1]
    end
    if j.parent ~= '' then
      hand_off(j.parent, flow_queue() .. '/' .. j.id, 'failed',
               'FlowConflictError: job id ' .. j.id .. ' is already in use', j.on_fail, now,
               maxlen)
    end
    return 'conflict', found[1]
  end
  if j.dedup then
    local outcome, state, standing = deduplicate(j, nil, events, maxlen)
    if outcome then return outcome, state, standing end
  end
  local state
  if j.children ~= '' then
    state = create_parent(job_key, j)
  else
    state = create_job(job_key, j, now, Q, maxlen)
  end
  if j.dedup then stand_for(j, j.id) end
  return 'created', state
end

local out, standing_ids = {}, {}
local closed = {}  -- references of this call's nodes that are not open
for i = 3, #ARGV, F do
  local j = parse(i)
  local ref = flow_queue() .. '/' .. j.id
  local outcome, state, standing
  if closed[j.parent] then
    outcome, state = 'skipped', ''
  else
    outcome, state, standing = add(j)
  end
  if not (outcome == 'created' or (outcome == 'exists' and state == 'waiting_children')) then
    closed[ref] = true
  end
  if standing then
    standing_ids[#standing_ids + 1] = (i - 3) / F + 1
    standing_ids[#standing_ids + 1] = standing
  end
  out[#out + 1] = outcome
  out[#out + 1] = state
end
for _, v in ipairs(standing_ids) do
  out[#out + 1] = v
end
return out

-- Flows (docs/protocol.md §14): a parent waits in `waiting_children` until
-- each child has settled, then runs. Needs `common`, `record`, `upsert`,
-- `place`, `finish` and `counts` first.
--
-- A node is named across queues by its reference `<queue>/<id>`. A parent's
-- keys, all under the parent's `base`: children:<id> (zset, every child, in
-- the order added), pending:<id> (set, not settled yet), processed:<id>,
-- ignored:<id>, cfailed:<id> (hashes: reference -> result or error).
-- A reference leaves `pending` exactly when its hand-off is applied: that is
-- the idempotency record that makes a repeated hand-off change nothing.

local FLOW_KEYS = {'children:', 'pending:', 'processed:', 'ignored:', 'cfailed:'}

-- Set by every write to this queue's `outbox` in this call: the script tells
-- its caller, who drains at once (§14.5), so no hand-off waits for a timer.
-- A script that answers per job or per hand-off sets it back to false first.
local outbox_sent = false
local function to_outbox(...)
  redis.call('XADD', base .. 'outbox', '*', ...)
  outbox_sent = true
end

-- This script's queue name, from its base `<prefix>:{<queue>}:` (nil in a
-- failure lane, whose jobs have no parent). Matched when a flow needs it, not
-- in every call of every script that includes this file.
local flow_queue_name = false
local function flow_queue()
  if flow_queue_name == false then
    flow_queue_name = string.match(base, '^.*:{([^}]*)}:$')
  end
  return flow_queue_name
end

local function split_ref(ref)
  local slash = string.find(ref, '/', 1, true)
  return string.sub(ref, 1, slash - 1), string.sub(ref, slash + 1)
end

-- A parent's dependency keys follow its record: expire with it, or go now.
local function keep_children(id, ttl)
  for _, name in ipairs(FLOW_KEYS) do
    if ttl > 0 then
      redis.call('PEXPIRE', base .. name .. id, ttl + EXPIRY_GRACE)
    else
      redis.call('DEL', base .. name .. id)
    end
  end
end

local settle, hand_off  -- mutually recursive: a failure climbs the tree

-- The parent fails because a child failed under `fail` (§14.5): as a final
-- fail of a run would, then it settles towards its own parent.
local function fail_parent(job_key, id, child, err, now, maxlen)
  local f = redis.call('HMGET', job_key, 'result_ttl', 'parent', 'on_fail')
  local error_text = 'ChildFailedError: child ' .. child .. ' failed: ' .. err
  redis.call('ZREM', base .. 'wchildren', id)
  redis.call('HSET', job_key, 'state', 'failed', 'finished_at', now, 'error', error_text)
  count_outcomes(now, 0, 1, 0, 0)
  emit(base .. 'events', maxlen, 'event', 'failed', 'id', id, 'error', error_text)
  hand_to_failure_lane(job_key, id, error_text, now, maxlen)
  notify_waiters(job_key, id, 'failed', error_text)
  local ttl = field(f[1], 'result_ttl')
  keep_children(id, ttl)
  if f[2] then
    hand_off(f[2], flow_queue() .. '/' .. id, 'failed', error_text, f[3] or '', now, maxlen)
  end
  retain(job_key, id, base .. 'failed', ttl, now)
end

-- Apply one hand-off to the parent `id` of this queue (§14.5 steps 1-3).
-- Returns 'dup' | 'recorded' | 'released' | 'failed'.
settle = function(id, child, outcome, payload, policy, now, maxlen)
  if redis.call('SREM', base .. 'pending:' .. id, child) == 0 then
    return 'dup'
  end
  local failed = outcome ~= 'completed'
  if not failed then
    redis.call('HSET', base .. 'processed:' .. id, child, payload)
  elseif policy == 'ignore' then
    redis.call('HSET', base .. 'ignored:' .. id, child, payload)
  elseif policy ~= 'remove' then
    redis.call('HSET', base .. 'cfailed:' .. id, child, payload)
  end
  local job_key = base .. 'job:' .. id
  local f = redis.call('HMGET', job_key, 'state', 'run_at', 'created_at')
  local fails_parent = failed and (policy == 'fail' or policy == '')
  if f[1] == 'active' and fails_parent and redis.call('HEXISTS', job_key, 'child_failed') == 0 then
    -- a step job (§14.10): it fails when it gives up its lease to wait
    redis.call('HSET', job_key, 'child_failed', child .. '\n' .. payload)
  end
  if f[1] ~= 'waiting_children' then
    return 'recorded'
  end
  if fails_parent then
    fail_parent(job_key, id, child, payload, now, maxlen)
    return 'failed'
  end
  if (failed and policy == 'continue') or redis.call('SCARD', base .. 'pending:' .. id) == 0 then
    redis.call('ZREM', base .. 'wchildren', id)
    local due = math.max(now, tonumber(f[2] or f[3] or '0') or 0)
    place(job_key, id, due, now, base .. 'ready', base .. 'scheduled', base .. 'marker')
    emit(base .. 'events', maxlen, 'event', 'children_done', 'id', id)
    return 'released'
  end
  return 'recorded'
end

-- A child's hand-off to its parent `parent_ref`: applied here when the parent
-- is in this queue, else written to this queue's outbox for a drainer.
hand_off = function(parent_ref, child, outcome, payload, policy, now, maxlen)
  local queue, id = split_ref(parent_ref)
  if queue == flow_queue() then
    return settle(id, child, outcome, payload, policy, now, maxlen)
  end
  to_outbox('parent', parent_ref, 'child', child, 'outcome', outcome, 'payload', payload,
            'policy', policy)
  return 'sent'
end

-- Called by every script that ends a run for good, before retention may
-- delete the record: `parent`, `on_fail`, `children` are the record's
-- fields (nil or false when absent), `ttl` its result_ttl. Returns
-- hand_off's result ('sent': written to the outbox), or nil without a parent;
-- `outbox_sent` tells whether anything (also a failure climbing further up
-- through a parent in this queue) went to the outbox.
local function flow_finished(id, outcome, payload, parent, on_fail, children, ttl, now, maxlen)
  if children then
    keep_children(id, ttl)
  end
  if parent then
    return hand_off(parent, flow_queue() .. '/' .. id, outcome, payload, on_fail or '', now, maxlen)
  end
  return nil
end

-- A node deleted before it settled (cancel, remove; §14.9), while its
-- record still exists: a parent's pending children are handed to the
-- outbox to be cancelled in batches by a drainer (pending:<id> becomes
-- cancelling:<id>), and a child settles as failed towards its own parent,
-- which so never waits for it.
local CANCELLED = 'JobCancelledError: the job was cancelled before it ran'
local function flow_dropped(job_key, id, state, now, maxlen)
  if state ~= 'waiting' and state ~= 'delayed' and state ~= 'waiting_children' then
    return
  end
  local f = redis.call('HMGET', job_key, 'parent', 'on_fail', 'children')
  if f[3] then
    redis.call('ZREM', base .. 'wchildren', id)
    local pending = base .. 'pending:' .. id
    if redis.call('EXISTS', pending) == 1 then
      redis.call('RENAME', pending, base .. 'cancelling:' .. id)
      to_outbox('op', 'cancel', 'parent', flow_queue() .. '/' .. id)
    end
  end
  if f[1] then
    hand_off(f[1], flow_queue() .. '/' .. id, 'failed', CANCELLED, f[2] or '', now, maxlen)
  end
end

-- cancel: remove a job that has not started (waiting, delayed, or a flow
-- parent in waiting_children) and any blocked twin of a running singleton.
--
-- KEYS[1] base        `<prefix>:{<queue>}:`
-- KEYS[2] ready       zset
-- KEYS[3] scheduled   zset
-- KEYS[4] blocked     zset
-- KEYS[5] events      stream
--
-- ARGV[1] id
-- ARGV[2] events stream max length
--
-- Returns: 1 when something was removed, 2 when it was and a flow's
-- hand-off or cancellation went to `outbox` (drain it now, §14.5), 0 when the
-- job did not exist or is running or finished (then nothing changes; a running
-- job's blocked twin is still removed and counts as 1).
-- Effects: the job hash and its index entry deleted; a `cancelled` event.
-- A flow node (docs/protocol.md §14.9): a parent's pending children are
-- left in cancelling:<id> with an `op cancel` outbox entry, for drainers to
-- cancel in batches; a child settles as failed towards its parent.
-- Complexity: O(log N).

-- @include common
-- @include record
-- @include upsert
-- @include place
-- @include finish
-- @include counts
-- @include flow

local ready, scheduled, blocked_index, events = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local id, maxlen = ARGV[1], ARGV[2]
local job_key = base .. 'job:' .. id
local removed = 0
if redis.call('DEL', base .. 'blocked:' .. id) == 1 then
  redis.call('ZREM', blocked_index, id)
  removed = 1
end
local state = redis.call('HGET', job_key, 'state')
flow_dropped(job_key, id, state, now_ms(), maxlen)
if state == 'waiting_children' then
  delete_job(job_key, id)
  removed = 1
elseif drop_pending(job_key, id, ready, scheduled) then
  removed = 1
end
if removed == 1 then
  emit(events, maxlen, 'event', 'cancelled', 'id', id)
end
return outbox_sent and 2 or removed

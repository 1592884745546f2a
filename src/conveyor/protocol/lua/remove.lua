-- remove: delete a job that is not running, whatever its state.
--
-- KEYS[1] base        `<prefix>:{<queue>}:`
-- KEYS[2] ready       zset
-- KEYS[3] scheduled   zset
-- KEYS[4] completed   zset
-- KEYS[5] failed      zset
-- KEYS[6] blocked     zset
-- KEYS[7] events      stream
--
-- ARGV[1] id
-- ARGV[2] events stream max length
--
-- Returns: 'removed' | 'removed+' (a flow's hand-off or cancellation went
-- to `outbox`: drain it now, §14.5) | 'missing' | 'active' (a running job is
-- not removed: cancel its blocked twin with cancel, or let it end).
-- Effects: the record deleted with its index entries (ready or group,
-- scheduled, completed, failed, wchildren, property indexes, a flow
-- parent's dependency keys) and its blocked twin; a
-- `removed` event. A flow node that had not settled: as for cancel
-- (docs/protocol.md §14.9).
-- Complexity: O(log N).

-- @include common
-- @include record
-- @include upsert
-- @include place
-- @include finish
-- @include counts
-- @include flow

local ready, scheduled, completed, failed = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local blocked_index, events = KEYS[6], KEYS[7]
local id, maxlen = ARGV[1], ARGV[2]
local job_key = base .. 'job:' .. id
local f = redis.call('HMGET', job_key, 'state', 'group')
if not f[1] then
  return 'missing'
end
if f[1] == 'active' then
  return 'active'
end
flow_dropped(job_key, id, f[1], now_ms(), maxlen)
unready(ready, id, f[2])
redis.call('ZREM', scheduled, id)
redis.call('ZREM', completed, id)
redis.call('ZREM', failed, id)
redis.call('ZREM', base .. 'wchildren', id)  -- a flow parent (§14)
if redis.call('DEL', base .. 'blocked:' .. id) == 1 then
  redis.call('ZREM', blocked_index, id)
end
delete_job(job_key, id)
emit(events, maxlen, 'event', 'removed', 'id', id)
return outbox_sent and 'removed+' or 'removed'

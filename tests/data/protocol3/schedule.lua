-- schedule: create or replace a repeatable job (cron or fixed interval).
--
-- KEYS[1] base        `<prefix>:{<queue>}:` — schedule:<sid>, job:<sid>@<tick> derive from it
-- KEYS[2] meta        hash: seq counters
-- KEYS[3] ready       zset
-- KEYS[4] scheduled   zset: due ms
-- KEYS[5] marker      zset: wake-up marker
-- KEYS[6] events      stream
-- KEYS[7] completed   zset
-- KEYS[8] failed      zset
-- KEYS[9] schedules   zset: schedule ids by the tick of their pending job
--
-- ARGV[1] events stream max length
-- ARGV[2] sid         schedule id
-- ARGV[3] first tick  ms: when the first job runs (the client computes it from cron / every)
-- ARGV[4] cron        a 5-field cron expression, or ''
-- ARGV[5] every_ms    a fixed interval, or ''
-- ARGV[6 ..] the job template: task, data, priority, max_failures, max_stalls,
--            min_backoff, max_backoff, timeout, result_ttl, group
--
-- Returns: {job id, state} of the pending job; {'', 'taken'} when the job
-- of the first tick has already started or finished: the client then sends
-- the call again with a later first tick (the old pending job is gone and
-- the hash written either way).
-- Effects: schedule:<sid> written (template, cron / every, next, job);
-- a pending job of an earlier definition that has not started is deleted
-- (one that is running finishes; its worker's schedule_next call then finds
-- `next` changed and adds nothing); the job `<sid>@<first tick>` created
-- (delayed, field schedule = sid); `schedules` scored by the first tick.
-- Complexity: O(log N).

-- @include common
-- @include record
-- @include upsert
-- @include place
-- @include finish
-- @include create
-- @include schedule

local Q = {meta = KEYS[2], ready = KEYS[3], scheduled = KEYS[4], marker = KEYS[5],
           events = KEYS[6], completed = KEYS[7], failed = KEYS[8]}
local maxlen, sid, first = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now = now_ms()
local key = base .. 'schedule:' .. sid

local pending = redis.call('HGET', key, 'job')
if pending then
  drop_pending(base .. 'job:' .. pending, pending, Q.ready, Q.scheduled)
end
redis.call('DEL', key)
local fields = {'cron', ARGV[4], 'every', ARGV[5]}
for i, name in ipairs(TEMPLATE) do
  fields[#fields + 1] = name
  fields[#fields + 1] = ARGV[5 + i]
end
redis.call('HSET', key, unpack(fields))
local job_id = create_tick(sid, first, now, Q, maxlen)
if not job_id then
  return {'', 'taken'}
end
return {job_id, redis.call('HGET', base .. 'job:' .. job_id, 'state')}

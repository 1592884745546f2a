-- schedule_next: after a tick's job was claimed, queue the next tick's job.
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
-- ARGV[2] sid
-- ARGV[3] fired tick  ms: the tick of the job that was claimed (from its id)
-- ARGV[4] next tick   ms: computed by the worker from cron / every, after now
--
-- Returns: 1 when the next job was queued; 2 when the schedule ended (the
-- next tick is past its `end`, or `runs` reached its `limit`: `next` and
-- `job` deleted, `ended` = now, `schedules` score +inf, §16.6); -1 when that tick's job has
-- already started or finished (the worker tries the tick after it); 0 when
-- the schedule is gone or
-- its `next` is no longer the fired tick (another worker advanced it, or
-- the schedule was replaced): compare-and-set, so however many workers
-- race, each tick yields exactly one job.
-- Effects: the job `<sid>@<next tick>` created (delayed); `next`, `job` and
-- the `schedules` score moved to the next tick.
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
local maxlen, sid, fired, following = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local now = now_ms()

local key = base .. 'schedule:' .. sid
local conf = redis.call('HMGET', key, 'next', 'end', 'limit', 'runs')
if conf[1] ~= fired then
  return 0
end
-- past its end date, or all its runs made: the schedule ends (§16.6)
if (tonumber(conf[2]) and following > tonumber(conf[2]))
    or (tonumber(conf[3]) and num(conf[4], 0) >= tonumber(conf[3])) then
  redis.call('HDEL', key, 'next', 'job')
  redis.call('HSET', key, 'ended', now)
  redis.call('ZADD', base .. 'schedules', '+inf', sid)
  return 2
end
if not create_tick(sid, following, now, Q, maxlen) then
  return -1
end
return 1

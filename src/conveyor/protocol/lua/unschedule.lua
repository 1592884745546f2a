-- unschedule: remove a repeatable job.
--
-- KEYS[1] base        `<prefix>:{<queue>}:`
-- KEYS[2] ready       zset
-- KEYS[3] scheduled   zset
-- KEYS[4] schedules   zset
--
-- ARGV[1] sid
--
-- Returns: 1 if the schedule existed, else 0.
-- Effects: schedule:<sid> deleted, its `schedules` entry removed, and its
-- pending job deleted if it has not started (a running one finishes; its
-- schedule_next call finds no schedule and adds nothing).
-- Complexity: O(log N).

-- @include common
-- @include record
-- @include upsert
-- @include place
-- @include finish

local ready, scheduled, schedules = KEYS[2], KEYS[3], KEYS[4]
local sid = ARGV[1]
local key = base .. 'schedule:' .. sid
local pending = redis.call('HGET', key, 'job')
if pending then
  drop_pending(base .. 'job:' .. pending, pending, ready, scheduled)
end
redis.call('ZREM', schedules, sid)
return redis.call('DEL', key)

-- progress: record how far a running job got.
--
-- KEYS[1] base        `<prefix>:{<queue>}:`
-- KEYS[2] events      stream
--
-- ARGV[1] id
-- ARGV[2] token       the claim's fencing token
-- ARGV[3] progress    a fraction in [0, 1] as text
-- ARGV[4] events stream max length
--
-- Returns: 1 = stored, 0 = lease lost (refused).
-- Effects: the job's `progress` field; a `progress` event.
-- Complexity: O(1).

-- @include common

local events = KEYS[2]
local id, token, progress, maxlen = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local job_key = base .. 'job:' .. id
local f = redis.call('HMGET', job_key, 'state', 'token')
if f[1] ~= 'active' or f[2] ~= token then
  return 0
end
redis.call('HSET', job_key, 'progress', progress)
emit(events, maxlen, 'event', 'progress', 'id', id, 'progress', progress)
return 1

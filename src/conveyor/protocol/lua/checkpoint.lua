-- checkpoint: save a running job's resumable state (docs/protocol.md §16.7).
--
-- KEYS[1] base        `<prefix>:{<queue>}:` — job:<id> derives from it
--
-- ARGV[1] id
-- ARGV[2] token       the claim's fencing token
-- ARGV[3] state       JSON text: what the next run needs to resume
--
-- Returns: 1 = saved, 0 = lease lost (refused, nothing written).
-- Effects: the record's `checkpoint` = state. Claim returns it with the job
-- (a run after a crash, a retry or a deferral resumes from it). No event.
-- Complexity: O(1).

-- @include common

local id, token, state = ARGV[1], ARGV[2], ARGV[3]
local job_key = base .. 'job:' .. id
local f = redis.call('HMGET', job_key, 'state', 'token')
if f[1] ~= 'active' or f[2] ~= token then
  return 0
end
redis.call('HSET', job_key, 'checkpoint', state)
return 1

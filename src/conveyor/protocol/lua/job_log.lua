-- job_log: append lines to a running job's own log (docs/protocol.md §15).
--
-- KEYS[1] base        `<prefix>:{<queue>}:` — job:<id> and log:<id> derive from it
--
-- ARGV[1] id
-- ARGV[2] token       the claim's fencing token
-- ARGV[3] max lines   the log keeps its last this many lines
-- ARGV[4] ttl ms      the log's expiry while the job lives on
-- ARGV[5..] lines
--
-- Returns: 1 = stored, 0 = lease lost (refused).
-- Effects: log:<id> gets the lines, trimmed to its last `max lines`, and
-- expires `ttl` ms later; the record gets `logged` = 1, by which the scripts
-- that end a run know to set the log's expiry to the record's; deleting the
-- record deletes it (finish.lua).
-- Complexity: O(lines).

-- @include common

local id, token, max_lines, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local job_key = base .. 'job:' .. id
local f = redis.call('HMGET', job_key, 'state', 'token')
if f[1] ~= 'active' or f[2] ~= token then
  return 0
end
local key = base .. 'log:' .. id
for i = 5, #ARGV do
  redis.call('RPUSH', key, ARGV[i])
end
redis.call('LTRIM', key, -max_lines, -1)
-- the run's end expires the log with the record only when this flag says there is one
redis.call('HSET', job_key, 'logged', '1')
redis.call('PEXPIRE', key, ttl)
return 1

-- policy: give a claimed job the options its task declares, where the job
-- does not carry its own (a job enqueued by name, from the CLI or another
-- language, carries only what its producer gave).
--
-- KEYS[1] base        `<prefix>:{<queue>}:` — job:<id> derives from it
--
-- ARGV[1] id
-- ARGV[2] token       the claim's fencing token
-- ARGV[3 ..] pairs    option name, value: max_failures, max_stalls (counts),
--                     min_backoff, max_backoff, timeout, result_ttl (ms);
--                     non-negative integers, at most one pair per name
--
-- Returns: {'lost'} when the job is not active under this token (nothing
--   changed); {'bad'} for an unknown name or a bad value (nothing changed);
--   else {'ok', timeout ms} — the timeout in force after the call.
--
-- Effects: each named field the record leaves out is set (HSETNX): an option
-- the job carries — given at enqueue, or a producer's queue default that
-- differs from the protocol's (§4.1) — wins over the task's.
-- Complexity: O(1) (at most six fields).

-- @include common
-- @include record

local NAMES = {max_failures = true, max_stalls = true, min_backoff = true,
               max_backoff = true, timeout = true, result_ttl = true}

local id, token = ARGV[1], ARGV[2]
local job_key = base .. 'job:' .. id
for i = 3, #ARGV - 1, 2 do
  local value = tonumber(ARGV[i + 1])
  if not NAMES[ARGV[i]] or not value or value < 0 or value ~= math.floor(value) then
    return {'bad'}
  end
end
local f = redis.call('HMGET', job_key, 'state', 'token')
if f[1] ~= 'active' or f[2] ~= token then
  return {'lost'}
end
for i = 3, #ARGV - 1, 2 do
  redis.call('HSETNX', job_key, ARGV[i], ARGV[i + 1])
end
return {'ok', field(redis.call('HGET', job_key, 'timeout'), 'timeout')}

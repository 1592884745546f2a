-- await: the first half of waiting for a job's outcome without polling.
--
-- KEYS[1] base        `<prefix>:{<queue>}:` — job:<id>, done:<id> derive from it
--
-- ARGV[1] id
--
-- Returns: {'missing'} when there is no such job;
--   {state, payload} when the job already finished (state completed or
--   failed; payload the result JSON or the error text);
--   {'pending'} otherwise: the job's `waiters` field is set, so the run's
--   end will RPUSH "<state>\n<payload>" to done:<id> (kept 60 s). The caller
--   then blocks on done:<id> with BLMOVE done:<id> done:<id> (so every
--   waiter sees the element) until its timeout.
--
-- Effects: when pending, `waiters` + 1; the first waiter of a run deletes
-- done:<id>, a notification an earlier run of the same id left behind.
-- Complexity: O(1).

-- @include common

local id = ARGV[1]
local job_key = base .. 'job:' .. id
local f = redis.call('HMGET', job_key, 'state', 'result', 'error')
if not f[1] then
  return {'missing'}
end
if f[1] == 'completed' then
  return {'completed', f[2] or 'null'}
end
if f[1] == 'failed' then
  return {'failed', f[3] or ''}
end
if redis.call('HINCRBY', job_key, 'waiters', 1) == 1 then
  redis.call('DEL', base .. 'done:' .. id)
end
return {'pending'}

-- flow_attach: a running job adds children to itself (the step-job pattern,
-- docs/protocol.md §14.10). Run on the parent's slot before the children are
-- written (flow_add), so none can settle before its parent waits for it.
--
-- KEYS[1] base        `<prefix>:{<queue>}:` — job:<id>, children:<id>, pending:<id> derive from it
--
-- ARGV[1] id          the running parent
-- ARGV[2] token       its lease's fencing token
-- ARGV[3 ..]          child references `<queue>/<id>`
--
-- Returns: the number of references added (a reference already among the
-- parent's children is not added again: a re-send changes nothing), or -1
-- when the lease is lost (the job is not active with this token): nothing changes.
--
-- Effects: children:<id> (scores after the last), pending:<id>, the record's
-- `children` count. No event (flow_wait writes `waiting_children`).
-- Complexity: O(references * log N).

-- @include common

local id, token = ARGV[1], ARGV[2]
local job_key = base .. 'job:' .. id
local f = redis.call('HMGET', job_key, 'state', 'token')
if f[1] ~= 'active' or f[2] ~= token then
  return -1
end
local children = base .. 'children:' .. id
local n = redis.call('ZCARD', children)
local added = 0
for i = 3, #ARGV do
  if not redis.call('ZSCORE', children, ARGV[i]) then
    n = n + 1
    added = added + 1
    redis.call('ZADD', children, n, ARGV[i])
    redis.call('SADD', base .. 'pending:' .. id, ARGV[i])
  end
end
redis.call('HSET', job_key, 'children', n)
return added

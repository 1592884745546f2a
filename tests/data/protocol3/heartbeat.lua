-- heartbeat: renew a worker's leases and its entry in the roll call.
--
-- KEYS[1] base        `<prefix>:{<queue>}:` — worker:<worker id> derives from it
-- KEYS[2] active      zset: lease deadline ms
-- KEYS[3] workers     zset: worker ids by registration expiry ms
--
-- ARGV[1] worker id
-- ARGV[2] lease_ms    new lease length from now
-- ARGV[3] worker_ttl_ms  how long the roll-call entry lives without a beat
-- ARGV[4] worker info (JSON text: host, pid, concurrency, started_at, ...)
-- ARGV[5 ..] per job, 2 entries: id, token
--
-- Returns: {now_ms, lost ids...}: the jobs whose lease this worker no
-- longer holds (token changed or job no longer active). The worker must
-- stop them: their writes will be refused.
--
-- Effects: first PEXPIRE of the worker's entry (keeps the script allowed under
-- maxmemory, see below); deadlines of held leases moved to now + lease_ms; the worker's
-- info stored for worker_ttl_ms; expired roll-call entries dropped (at most 10).
-- Complexity: O(batch * log N).

-- @include common

local active, workers = KEYS[2], KEYS[3]
local worker, lease, ttl, info = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local now = now_ms()

-- Under maxmemory, Redis refuses a script whose first write may grow memory.
-- Renewing leases does not grow it, so write something harmless first: once
-- the script has written, the later ZADD XX are allowed and leases survive.
redis.call('PEXPIRE', base .. 'worker:' .. worker, ttl)

local out = {now}
for i = 5, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local f = redis.call('HMGET', base .. 'job:' .. id, 'state', 'token')
  if f[1] == 'active' and f[2] == token then
    redis.call('ZADD', active, 'XX', now + lease, id)
  else
    out[#out + 1] = id
  end
end

redis.call('ZADD', workers, now + ttl, worker)
redis.call('SET', base .. 'worker:' .. worker, info, 'PX', ttl)
local gone = redis.call('ZRANGEBYSCORE', workers, '-inf', now, 'LIMIT', 0, 10)
for _, w in ipairs(gone) do
  redis.call('ZREM', workers, w)
end
return out

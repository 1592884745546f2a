-- Rate limits that hold in every window (docs/protocol.md §3.2): a
-- sliding-window log. `key` (a zset: `rate` for the queue, `grate:<group>`
-- for a group) holds one member per lease taken in the last `window_ms`,
-- scored by its lease time. A lease is allowed only while fewer than `rate`
-- leases scored in (now - window_ms, now] are logged, so no interval of
-- window_ms ms ever holds more than `rate` leases. Memory: at most `rate`
-- members per key; each call removes what it finds expired (bounded by the
-- leases of one window). Needs `common`.

-- How many leases the log at `key` allows now under `rate` per `window_ms`,
-- and (when none) when the next one frees up, ms.
local function rate_room(key, rate, window_ms, now)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window_ms)
  local used = redis.call('ZCARD', key)
  if used < rate then return rate - used, nil end
  -- the (used - rate + 1)-th oldest lease leaves the window first enough
  local oldest = redis.call('ZRANGE', key, used - rate, used - rate, 'WITHSCORES')
  return 0, tonumber(oldest[2]) + window_ms
end

-- Log `n` leases at `now`; each member is a number unique in the queue
-- (`meta` `rate_seq`, one HINCRBY per call that logs).
local function rate_log(key, n, window_ms, now)
  local last = redis.call('HINCRBY', base .. 'meta', 'rate_seq', n)
  local args = {}
  for k = last - n + 1, last do
    args[#args + 1] = now
    args[#args + 1] = k
  end
  redis.call('ZADD', key, unpack(args))
  redis.call('PEXPIRE', key, window_ms)
end

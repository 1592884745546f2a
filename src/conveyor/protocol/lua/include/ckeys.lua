-- Concurrency keys (docs/protocol.md §16.5): a job may name up to 4 keys
-- (`ckeys`, comma-separated names), each with its own limits in
-- `kconf:<key>` (`concurrency`, `rate`, `window` ms), changeable at run time.
-- Running jobs per key are counted in `kactive` (hash), leases in the
-- sliding log `krate:<key>` (rate.lua). A claimed job that one of its keys
-- holds back is *parked*: moved from its ready index to `kwait:<key>` (and
-- `parked`, for counting), keeping its ready score, state `waiting`. It goes
-- back to its ready index when a run holding that key ends (one job per run
-- end), when the key's rate frees up (`kheld`: key -> when, moved by claim's
-- promotion), or when the key's limits change. Needs `common`, `place`, `rate`
-- and `unpark` (ckey_names, ckey_unpark, ckey_end).

local CKEY_INF = -1

-- Nil when every key lets the job run now; else the key holding it back and
-- until when (CKEY_INF: until one of its runs ends).
local function ckey_hold(field_value, now)
  for _, key in ipairs(ckey_names(field_value)) do
    local conf = redis.call('HMGET', base .. 'kconf:' .. key, 'concurrency', 'rate', 'window')
    local cap = tonumber(conf[1])
    if cap and num(redis.call('HGET', base .. 'kactive', key), 0) >= cap then
      return key, CKEY_INF
    end
    local rate = tonumber(conf[2])
    if rate then
      local room, frees = rate_room(base .. 'krate:' .. key, rate, num(conf[3], 1000), now)
      if room < 1 then return key, frees end
    end
  end
  return nil
end

-- The job's keys count one more running job and one more lease.
local function ckey_take(field_value, now)
  for _, key in ipairs(ckey_names(field_value)) do
    redis.call('HINCRBY', base .. 'kactive', key, 1)
    local conf = redis.call('HMGET', base .. 'kconf:' .. key, 'rate', 'window')
    if tonumber(conf[1]) then
      rate_log(base .. 'krate:' .. key, 1, num(conf[2], 1000), now)
    end
  end
end

local function ckey_park(id, score, key, until_ms)
  redis.call('ZADD', base .. 'kwait:' .. key, score, id)
  redis.call('ZADD', base .. 'parked', score, id)
  if until_ms ~= CKEY_INF then
    local held = tonumber(redis.call('ZSCORE', base .. 'kheld', key))
    if not held or until_ms < held then
      redis.call('ZADD', base .. 'kheld', until_ms, key)
    end
  end
end

-- Keys whose rate has freed up (kheld score <= now) let their jobs back, at
-- most `limit` jobs a key (the rest at the next claim).
local function ckey_release_due(now, limit, marker)
  local due = redis.call('ZRANGEBYSCORE', base .. 'kheld', '-inf', now, 'LIMIT', 0, limit)
  for _, key in ipairs(due) do
    redis.call('ZREM', base .. 'kheld', key)
    ckey_unpark(key, limit, marker)
    if redis.call('EXISTS', base .. 'kwait:' .. key) == 1 then
      redis.call('ZADD', base .. 'kheld', now, key)  -- more than `limit`: the next claim goes on
      return
    end
  end
end

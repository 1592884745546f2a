-- record_metrics: add what a worker counted since its last call to the
-- queue's metrics history (docs/protocol.md §15).
--
-- KEYS[1] base        `<prefix>:{<queue>}:` — metrics:<hour>, timings:<hour> and
--                     tmax:<hour> derive from it
-- KEYS[2] totals      hash: completed, failed, retried, stalled
--
-- ARGV[1] completed   runs completed
-- ARGV[2] failed      jobs failed for good (final failures and final stalls)
-- ARGV[3] retried     failed runs to be retried
-- ARGV[4] stalled     expired leases recovered or failed by the reaper
-- ARGV[5] retention   ms the hour's keys live after this write
-- ARGV[6..] pairs of timings field (`<kind><bucket>:<task>` or `<kind>s:<task>`) and increment,
--           or of `max/<kind>:<task>` and the largest duration (µs) since the last call
--
-- Returns: the hour written (Redis time, ms // 3600000).
-- Effects: metrics:<hour> field <minute of the hour> ("completed failed retried")
-- increased, when any is not zero; timings:<hour> fields increased; tmax:<hour>
-- field `<kind>:<task>` raised to each max given; totals increased; the hour
-- keys written expire `retention` ms from now.
-- Complexity: O(1 + timings pairs).

-- @include common

local totals = KEYS[2]
local completed, failed, retried = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local stalled, retention = tonumber(ARGV[4]), tonumber(ARGV[5])
local now = now_ms()
local hour = math.floor(now / 3600000)
local minute = tostring(math.floor(now / 60000) % 60)

if completed + failed + retried > 0 then
  local key = base .. 'metrics:' .. hour
  local c, f, r = 0, 0, 0
  local stored = redis.call('HGET', key, minute)
  if stored then
    local a, b, d = string.match(stored, '^(%d+) (%d+) (%d+)$')
    c, f, r = tonumber(a) or 0, tonumber(b) or 0, tonumber(d) or 0
  end
  redis.call('HSET', key, minute, (c + completed) .. ' ' .. (f + failed) .. ' ' .. (r + retried))
  redis.call('PEXPIRE', key, retention)
end

if #ARGV > 5 then
  local key = base .. 'timings:' .. hour
  local maxima = base .. 'tmax:' .. hour
  local counted, raised = false, false
  for i = 6, #ARGV, 2 do
    local field = ARGV[i]
    if string.sub(field, 1, 4) == 'max/' then
      field = string.sub(field, 5)
      local value = tonumber(ARGV[i + 1])
      local stored = tonumber(redis.call('HGET', maxima, field))
      if not stored or value > stored then
        redis.call('HSET', maxima, field, ARGV[i + 1])
      end
      raised = true
    else
      redis.call('HINCRBY', key, field, ARGV[i + 1])
      counted = true
    end
  end
  if counted then redis.call('PEXPIRE', key, retention) end
  if raised then redis.call('PEXPIRE', maxima, retention) end
end

for name, n in pairs({completed = completed, failed = failed, retried = retried,
                      stalled = stalled}) do
  if n > 0 then
    redis.call('HINCRBY', totals, name, n)
  end
end
return hour

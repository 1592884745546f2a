-- Outcome counts (docs/protocol.md §15): `totals` and the minute's field of
-- `metrics:<hour>`, written by the script that ends the runs, so they equal
-- what happened whatever becomes of the worker after. Needs `common`.
local COUNTS_RETENTION_MS = 7 * 24 * 3600000 + 3600000

local function count_outcomes(now, completed, failed, retried, stalled)
  local totals = base .. 'totals'
  if completed > 0 then redis.call('HINCRBY', totals, 'completed', completed) end
  if failed > 0 then redis.call('HINCRBY', totals, 'failed', failed) end
  if retried > 0 then redis.call('HINCRBY', totals, 'retried', retried) end
  if stalled > 0 then redis.call('HINCRBY', totals, 'stalled', stalled) end
  if completed + failed + retried == 0 then return end
  local key = base .. 'metrics:' .. math.floor(now / 3600000)
  local minute = tostring(math.floor(now / 60000) % 60)
  local c, f, r = string.match(redis.call('HGET', key, minute) or '0 0 0', '^(%d+) (%d+) (%d+)$')
  redis.call('HSET', key, minute, ((tonumber(c) or 0) + completed) .. ' ' ..
             ((tonumber(f) or 0) + failed) .. ' ' .. ((tonumber(r) or 0) + retried))
  redis.call('PEXPIRE', key, COUNTS_RETENTION_MS)
end

-- Upsert rules, shared by enqueue (a waiting or blocked job enqueued again)
-- and by finish (a blocked twin merged into a retried run). Needs `common`
-- and `record`.
--
-- `new` holds job fields (task, data, run_at, max_failures, ...; a missing
-- run_at is created_at, a missing option its record default) and the
-- flags u_data, u_run_at, u_max_failures, u_max_stalls, u_min_backoff,
-- u_max_backoff, u_reset. u_run_at is '1', '0', 'later' or 'earlier'.

local UPSERT_FLAGS = {'u_data', 'u_run_at', 'u_max_failures', 'u_max_stalls',
                'u_min_backoff', 'u_max_backoff', 'u_reset'}

local OPTION_FLAGS = {
  {'u_max_failures', 'max_failures'}, {'u_max_stalls', 'max_stalls'},
  {'u_min_backoff', 'min_backoff'}, {'u_max_backoff', 'max_backoff'},
}

-- Whether a new run-at replaces the current one.
local function takes_run_at(rule, current, proposed)
  if rule == '1' then return true end
  if rule == 'later' then return proposed > current end
  if rule == 'earlier' then return proposed < current end
  return false
end

-- Applies `new` to the hash at `key`; returns the (possibly new) run_at.
local function upsert(key, new)
  if new.u_data == '1' then
    replace_data(key, new.data, {'task', new.task})
  end
  for _, pair in ipairs(OPTION_FLAGS) do
    if new[pair[1]] == '1' then
      redis.call('HSET', key, pair[2], field(new[pair[2]], pair[2]))
    end
  end
  if new.u_reset == '1' then
    redis.call('HSET', key, 'attempts', 0, 'failures', 0, 'stalls', 0)
  end
  local times = redis.call('HMGET', key, 'run_at', 'created_at')
  local current = tonumber(times[1] or times[2] or '0')
  local proposed = tonumber(new.run_at or new.created_at)
  if takes_run_at(new.u_run_at, current, proposed) then
    redis.call('HSET', key, 'run_at', proposed)
    return proposed
  end
  return current
end

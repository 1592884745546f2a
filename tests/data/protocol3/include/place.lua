-- Placing a runnable job in its ready index (or the scheduled one), shared by
-- enqueue and the scripts that end or move a run. Needs `common`.
-- Grouped jobs (a tenant, a user) wait in their group's own ready index;
-- `groups` holds the groups that have ready jobs and may run, scored by
-- when each was last served (lowest first: round robin). A group that is
-- paused or at a limit waits in `gwait` instead (score: when to look again,
-- +inf until an event such as a finished run or a resume).
local function group_ready(group)
  return base .. 'gready:' .. group
end

local function enter_rotation(group)
  if not redis.call('ZSCORE', base .. 'gwait', group) then
    redis.call('ZADD', base .. 'groups', 'NX', 0, group)
  end
end

-- Place a runnable job: ready (and wake a worker) or scheduled at `due`.
local function place(job_key, id, due, now, ready, scheduled, marker)
  if due > now then
    redis.call('HSET', job_key, 'state', 'delayed', 'run_at', due)
    redis.call('ZADD', scheduled, due, id)
    wake(marker)
    return 'delayed'
  end
  local f = redis.call('HMGET', job_key, 'priority', 'seq', 'group')
  redis.call('HSET', job_key, 'state', 'waiting')
  if f[3] and f[3] ~= '' then
    redis.call('ZADD', group_ready(f[3]), ready_score(f[1], f[2]), id)
    enter_rotation(f[3])
  else
    redis.call('ZADD', ready, ready_score(f[1], f[2]), id)
  end
  wake(marker)
  return 'waiting'
end

-- Take a waiting job out of whichever ready index holds it.
local function unready(ready, id, group)
  if group and group ~= '' then
    redis.call('ZREM', group_ready(group), id)
  else
    redis.call('ZREM', ready, id)
  end
end


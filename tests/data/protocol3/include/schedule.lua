-- Repeatable jobs, shared by schedule and schedule_next. Needs common,
-- finish, create. A schedule `schedule:<sid>` holds a job template (task,
-- data, priority, max_failures, max_stalls, min_backoff, max_backoff,
-- timeout, result_ttl, group), its timing (`cron` or `every` ms) and `next`,
-- the tick whose job is pending. Each tick's job has the id `<sid>@<tick>`
-- and the field `schedule` = sid; exactly one is pending per schedule.

local TEMPLATE = {'task', 'data', 'priority', 'max_failures', 'max_stalls', 'min_backoff',
                  'max_backoff', 'timeout', 'result_ttl', 'group'}

-- Make the job of `tick` the schedule's pending one, creating it from the
-- template unless it is already pending. Returns nil, changing nothing, when
-- that tick's job has already started or finished (promoted and run early,
-- say): the caller must pick a later tick, or the schedule would point at a
-- job no worker will ever claim again.
local function create_tick(sid, tick, now, Q, maxlen)
  local job_id = sid .. '@' .. tick
  local job_key = base .. 'job:' .. job_id
  local state = redis.call('HGET', job_key, 'state')
  if state and state ~= 'waiting' and state ~= 'delayed' then
    return nil
  end
  if not state then
    local values = redis.call('HMGET', base .. 'schedule:' .. sid, unpack(TEMPLATE))
    local j = {id = job_id, run_at = tick, lifo = '0', schedule = sid}
    for i, name in ipairs(TEMPLATE) do
      j[name] = values[i] or ''
    end
    create_job(job_key, j, now, Q, maxlen)
  end
  redis.call('HSET', base .. 'schedule:' .. sid, 'next', tick, 'job', job_id)
  redis.call('ZADD', base .. 'schedules', tick, sid)
  return job_id
end

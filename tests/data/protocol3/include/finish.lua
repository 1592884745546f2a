-- Shared by the scripts that end a run (complete, fail, reap): tell waiters,
-- keep the record for its retention time, free a singleton's blocked twin.
-- Needs `common`, `upsert` and `place` first.

-- A waiter (see await.lua) registered itself with HINCRBY waiters: only then
-- is a notification list written, so unobserved jobs cost nothing extra.
-- `waiters` may be passed when the caller already read it (false: none).
local function notify_waiters(job_key, id, state, payload, waiters)
  if waiters == nil then
    waiters = redis.call('HGET', job_key, 'waiters')
  end
  if waiters then
    local done = base .. 'done:' .. id
    redis.call('RPUSH', done, state .. '\n' .. payload)
    redis.call('PEXPIRE', done, 60000)
    redis.call('HDEL', job_key, 'waiters')
  end
end

-- Lookup by property: a job enqueued with index entries ("field:value"
-- lines, kept in its `idx` field) is listed in `idx:<field>:<value>` (zset
-- by created_at). Deleting a record must take it out of those first.
local function unindex(job_key, id)
  local entries = redis.call('HGET', job_key, 'idx')
  if entries then
    for line in string.gmatch(entries, '[^\n]+') do
      redis.call('ZREM', base .. 'idx:' .. line, id)
    end
  end
end

local function delete_job(job_key, id)
  unindex(job_key, id)
  redis.call('DEL', job_key)
end

-- The record outlives its index entry by this much, so that a sweep (not
-- key expiry) deletes it and can clean its property index first.
local EXPIRY_GRACE = 60000

-- Keep a finished record in `index` (completed or failed, scored by expiry)
-- for ttl ms, or delete it at once when ttl is 0.
local function retain(job_key, id, index, ttl, now)
  ttl = num(ttl, 86400000)
  if ttl <= 0 then
    delete_job(job_key, id)
  else
    redis.call('ZADD', index, now + ttl, id)
    redis.call('PEXPIRE', job_key, ttl + EXPIRY_GRACE)
  end
end

local function drop_finished(index, id)
  redis.call('ZREM', index, id)
  local job_key = base .. 'job:' .. id
  local state = redis.call('HGET', job_key, 'state')
  if state == 'completed' or state == 'failed' then
    delete_job(job_key, id)
  end
end

-- Drop up to `limit` records whose retention ran out, then — when the queue
-- keeps only a number of them (meta keep_completed / keep_failed) — up to
-- `limit` of the oldest beyond that number. Each finish removes at least as
-- many as it adds, so an index never grows past its retention. The record
-- may have expired already and its id been enqueued anew: only a record
-- still in a finished state is deleted.
local function sweep(index, now, limit)
  local old = redis.call('ZRANGEBYSCORE', index, '-inf', now, 'LIMIT', 0, limit)
  for _, id in ipairs(old) do
    drop_finished(index, id)
  end
  local kind = string.sub(index, #base + 1)
  local keep = tonumber(redis.call('HGET', base .. 'meta', 'keep_' .. kind))
  if keep then
    local extra = math.min(redis.call('ZCARD', index) - keep, limit)
    if extra > 0 then
      for _, id in ipairs(redis.call('ZRANGE', index, 0, extra - 1)) do
        drop_finished(index, id)
      end
    end
  end
end

-- Every run's end (complete, fail, reap, release): free its group's slot,
-- bring a group that waited for that slot back, and wake a worker when a
-- concurrency cap may have held one back.
-- Facts read once per script call, not once per job.
local cached = {}
local function queue_capped()
  if cached.capped == nil then
    cached.capped = redis.call('HEXISTS', base .. 'meta', 'concurrency') == 1
  end
  return cached.capped
end

local function twins_exist(blocked_index)
  if cached.twins == nil then
    cached.twins = redis.call('EXISTS', blocked_index) == 1
  end
  return cached.twins
end

-- `group` may be passed when the caller already read it (false: none).
local function end_run(job_key, marker, group)
  if group == nil then
    group = redis.call('HGET', job_key, 'group')
  end
  if group and group ~= '' then
    if redis.call('HINCRBY', base .. 'gactive', group, -1) <= 0 then
      redis.call('HDEL', base .. 'gactive', group)
    end
    local waiting = redis.call('ZSCORE', base .. 'gwait', group)
    if waiting == 'inf' and redis.call('HGET', base .. 'gconf:' .. group, 'paused') ~= '1' then
      redis.call('ZREM', base .. 'gwait', group)
      if redis.call('ZCARD', group_ready(group)) > 0 then
        redis.call('ZADD', base .. 'groups', 'NX', 0, group)
      end
      wake(marker)
    end
  end
  if queue_capped() then
    wake(marker)
  end
end

-- A singleton re-enqueued while it ran waits in blocked:<id>. When the run
-- ends for good, the blocked record becomes the job and is placed; returns
-- whether there was one (then the finished record is gone, not retained).
local function release_blocked(job_key, id, now, ready, scheduled, marker, blocked_index)
  local blocked_key = base .. 'blocked:' .. id
  if not twins_exist(blocked_index) or redis.call('EXISTS', blocked_key) == 0 then
    return false
  end
  redis.call('ZREM', blocked_index, id)
  redis.call('RENAME', blocked_key, job_key)
  redis.call('HDEL', job_key, unpack(UPSERT_FLAGS))
  local times = redis.call('HMGET', job_key, 'run_at', 'created_at')
  place(job_key, id, tonumber(times[1] or times[2] or '0'), now, ready, scheduled, marker)
  return true
end

-- When a run ends in a retry, a blocked twin is merged into the job by the
-- upsert rules its enqueue asked for, instead of replacing it. Returns the
-- earliest time the job may run again: `due`, or the merged run_at if later.
local function merge_blocked(job_key, id, blocked_index, due)
  if not twins_exist(blocked_index) then
    return due
  end
  local blocked_key = base .. 'blocked:' .. id
  local flat = redis.call('HGETALL', blocked_key)
  if #flat == 0 then
    return due
  end
  local twin = record_table(flat)
  local run_at = upsert(job_key, twin)
  redis.call('DEL', blocked_key)
  redis.call('ZREM', blocked_index, id)
  return math.max(due, run_at)
end

-- Failure handlers. A task named in `failure_tasks` (a set its workers
-- register) gets, when one of its jobs fails for good, a job in the queue's
-- failure lane — the keys under `base .. 'failures:'`, same slot — with id
-- `<id>@<now>`, the same task name, data `{"data": <the job's data>,
-- "error": <the error>, "job": {id, task, attempts, failures, stalls,
-- created_at, finished_at}}`, and a long backoff: 10 tries, 1 min to 1 h.
local FAILURE_RETRIES, FAILURE_MIN_BACKOFF, FAILURE_MAX_BACKOFF = 10, 60000, 3600000

local function hand_to_failure_lane(job_key, id, err, now, maxlen)
  local f = redis.call('HMGET', job_key, 'task', 'data', 'attempts', 'failures', 'stalls',
                       'created_at', 'timeout', 'result_ttl', 'priority', 'data2', 'data3')
  if not f[1] or redis.call('SISMEMBER', base .. 'failure_tasks', f[1]) == 0 then
    return
  end
  local lane = base .. 'failures:'
  local failure_id = id .. '@' .. now
  local key = lane .. 'job:' .. failure_id
  if redis.call('EXISTS', key) == 1 then
    return
  end
  local record = cjson.encode({id = id, task = f[1], attempts = num(f[3], 0),
                               failures = num(f[4], 0), stalls = num(f[5], 0),
                               created_at = num(f[6], 0), finished_at = now})
  local data = '{"data":' .. (read_data(job_key, f[2], f[10], f[11]) or 'null') ..
               ',"error":' .. cjson.encode(err) .. ',"job":' .. record .. '}'
  local seq = 1073741824 + (redis.call('HINCRBY', lane .. 'meta', 'seq', 1) % 1073741824)
  local fields = {'state', 'waiting', 'task', f[1],
             'priority', field(f[9], 'priority'), 'seq', seq, 'attempts', 0, 'failures', 0, 'stalls', 0,
             'max_failures', FAILURE_RETRIES, 'max_stalls', 3,
             'min_backoff', FAILURE_MIN_BACKOFF, 'max_backoff', FAILURE_MAX_BACKOFF,
             'timeout', field(f[7], 'timeout'), 'result_ttl', field(f[8], 'result_ttl'),
             'created_at', now, 'run_at', now}
  put_data(fields, data)
  redis.call('HSET', key, unpack(fields))
  redis.call('ZADD', lane .. 'ready', ready_score(f[9], seq), failure_id)
  wake(lane .. 'marker')
  emit(lane .. 'events', maxlen, 'event', 'created', 'id', failure_id, 'state', 'waiting',
       'failed_id', id)
end

-- Delete a job that has not started (waiting or delayed); true if it was one.
local function drop_pending(job_key, id, ready, scheduled)
  local f = redis.call('HMGET', job_key, 'state', 'group')
  if f[1] ~= 'waiting' and f[1] ~= 'delayed' then
    return false
  end
  unready(ready, id, f[2])
  redis.call('ZREM', scheduled, id)
  delete_job(job_key, id)
  return true
end

-- Expire if not started (docs/protocol.md §16.2): a job created with a
-- deadline (`expires_at`, ms) that is claimed after it is not run but fails
-- for good, as a final fail would end it. Needs `common`, `record`,
-- `upsert`, `place`, `finish` and `flow`.

local function expired_error(deadline)
  return 'JobExpiredError: not started by its deadline (expires_at ' .. deadline .. ' ms)'
end

-- Whether the claimed record (fields already read) is past its deadline.
local function past_deadline(expires_at, now)
  return expires_at ~= nil and expires_at ~= false and (tonumber(expires_at) or now + 1) <= now
end

-- A waiting job never has a blocked twin (twins wait for active jobs only),
-- never holds a group slot, and has no lease: only the final fail's ending.
local function expire_job(job_key, id, deadline, now, failed, events, maxlen)
  local err = expired_error(deadline)
  redis.call('HSET', job_key, 'state', 'failed', 'finished_at', now, 'error', err)
  emit(events, maxlen, 'event', 'failed', 'id', id, 'error', err, 'expired', '1')
  hand_to_failure_lane(job_key, id, err, now, maxlen)
  notify_waiters(job_key, id, 'failed', err)
  local f = redis.call('HMGET', job_key, 'parent', 'on_fail', 'children', 'result_ttl')
  if f[1] or f[3] then  -- a flow's node: settle towards its parent (§14.4)
    flow_finished(id, 'failed', err, f[1], f[2], f[3], field(f[4], 'result_ttl'), now, maxlen)
  end
  retain(job_key, id, failed, field(f[4], 'result_ttl'), now)
end

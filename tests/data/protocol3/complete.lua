-- complete: end leased runs successfully and store their results.
--
-- KEYS[1] base        `<prefix>:{<queue>}:`
-- KEYS[2] active      zset: lease deadline ms
-- KEYS[3] completed   zset: finished ids by expiry ms
-- KEYS[4] ready       zset (a released blocked twin goes here)
-- KEYS[5] scheduled   zset (... or here)
-- KEYS[6] marker      zset: wake-up marker
-- KEYS[7] events      stream
-- KEYS[8] blocked     zset: ids with a blocked twin
--
-- ARGV[1] events stream max length
-- ARGV[2 ..] per job, 3 entries: id, token, result (JSON text)
--
-- Returns, per job in order: 1 = completed, 0 = lease lost (the token does
-- not match or the job is no longer active: the write is refused — fencing).
--
-- Effects: state completed, result, finished_at; the job leaves `active`;
-- kept result_ttl ms in `completed` (deleted at once when 0); waiters told;
-- a blocked twin becomes runnable; a `completed` event; up to 2 expired
-- completed records swept per job.
-- Complexity: O(batch * log N).

-- @include common
-- @include record
-- @include upsert
-- @include place
-- @include finish

local active, completed, ready, scheduled = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local marker, events, blocked_index = KEYS[6], KEYS[7], KEYS[8]
local maxlen = ARGV[1]
local now = now_ms()

local out = {}
for i = 2, #ARGV, 3 do
  local id, token, result = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local job_key = base .. 'job:' .. id
  local f = redis.call('HMGET', job_key, 'state', 'token', 'result_ttl', 'group', 'waiters')
  if f[1] ~= 'active' or f[2] ~= token then
    out[#out + 1] = 0
  else
    redis.call('ZREM', active, id)
    end_run(job_key, marker, f[4])
    redis.call('HSET', job_key, 'state', 'completed', 'result', result, 'finished_at', now)
    emit(events, maxlen, 'event', 'completed', 'id', id)
    notify_waiters(job_key, id, 'completed', result, f[5])
    if not release_blocked(job_key, id, now, ready, scheduled, marker, blocked_index) then
      retain(job_key, id, completed, field(f[3], 'result_ttl'), now)
    end
    out[#out + 1] = 1
  end
end
sweep(completed, now, 2 * #out)
return out

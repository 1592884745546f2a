-- forget: delete finished jobs that a reader has copied elsewhere (the archive),
-- each only if it is still the run that was copied.
--
-- KEYS[1] base        `<prefix>:{<queue>}:`
-- KEYS[2] completed   zset: completed ids by expiry ms
-- KEYS[3] failed      zset: failed ids by expiry ms
--
-- ARGV[1], ARGV[2] ... per job, 2 entries: id, finished_at (ms, as the reader
--                     saw it)
--
-- Returns: {removed, kept}: removed = records deleted; kept = records left
-- alone because they are not completed or failed any more, or finished at
-- another time (the id was enqueued again and ran anew), or are gone.
-- Effects: per removed job: ZREM from completed or failed, and the record
-- deleted as every deletion does (property index entries, its job log, a
-- flow parent's dependency keys: delete_job). No event: the job had ended.
-- Complexity: O(jobs * log N).

-- @include common
-- @include record
-- @include upsert
-- @include place
-- @include finish

local indexes = {completed = KEYS[2], failed = KEYS[3]}
local removed, kept = 0, 0
for i = 1, #ARGV, 2 do
  local id, finished_at = ARGV[i], ARGV[i + 1]
  local job_key = base .. 'job:' .. id
  local f = redis.call('HMGET', job_key, 'state', 'finished_at')
  local index = f[1] and indexes[f[1]]
  if index and f[2] == finished_at then
    redis.call('ZREM', index, id)
    delete_job(job_key, id)
    removed = removed + 1
  else
    kept = kept + 1
  end
end
return {removed, kept}

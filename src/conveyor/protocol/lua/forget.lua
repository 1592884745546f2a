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
-- Complexity: O(jobs * log N); one HMGET per job, one ZREM per index.

-- @include common
-- @include record
-- @include upsert
-- @include place
-- @include finish

-- one HMGET per job (its fields and delete_job's), one ZREM per index per call
local unfinish = {}
local flushes = {}
for i, state in ipairs({'completed', 'failed'}) do
  unfinish[state], flushes[i] = batch('ZREM', KEYS[i + 1])
end
local removed, kept = 0, 0
for i = 1, #ARGV, 2 do
  local id, finished_at = ARGV[i], ARGV[i + 1]
  local job_key = base .. 'job:' .. id
  local f = redis.call('HMGET', job_key, 'state', 'finished_at', 'idx', 'children', 'dedup')
  local unindex_finished = f[1] and unfinish[f[1]]
  if unindex_finished and f[2] == finished_at then
    unindex_finished(id)
    delete_job(job_key, id, f[3] or false, f[4], f[5])
    removed = removed + 1
  else
    kept = kept + 1
  end
end
flushes[1]()
flushes[2]()
return {removed, kept}

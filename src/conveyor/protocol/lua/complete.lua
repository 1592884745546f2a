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
-- Returns, per job in order: 1 = completed, 2 = completed and its flow
-- hand-off written to `outbox` (for a drainer to carry to its parent's queue
-- soon), 0 = lease lost (the token does not match or the job is no longer
-- active: the write is refused — fencing).
--
-- Effects: state completed, result, finished_at; the job leaves `active`;
-- kept result_ttl ms in `completed` (deleted at once when 0); waiters told;
-- a blocked twin becomes runnable; one `completed` event for the call's jobs
-- (§11); up to 2 expired
-- completed records swept per job; a flow child's hand-off to its parent
-- (applied here when the parent is in this queue, else written to `outbox`);
-- the completions added to `totals` and the minute's counts (counts.lua).
-- Complexity: O(batch * log N).

-- @include common
-- @include record
-- @include upsert
-- @include place
-- @include unpark
-- @include finish
-- @include counts
-- @include flow

local active, completed, ready, scheduled = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local marker, events, blocked_index = KEYS[6], KEYS[7], KEYS[8]
local maxlen = ARGV[1]
local now = now_ms()
local now_text = int_text(now)
-- one ZREM active and one ZADD completed for the call's jobs
local unlease, write_unleases = batch('ZREM', active)
local keep, write_kept = batch('ZADD', completed)

-- The record's fields this call reads per job: `ckeys` only while jobs with
-- concurrency keys run (end_run's own test), `on_fail` only for a child.
local FIELDS = {'state', 'token', 'result_ttl', 'group', 'waiters', 'parent', 'children',
                'logged'}
local keyed = keyed_running()
if keyed then FIELDS[#FIELDS + 1] = 'ckeys' end
local twins = twins_exist(blocked_index)
local default_ttl = RECORD_DEFAULTS.result_ttl
local default_until = int_text(now + default_ttl)
-- an absolute time: PEXPIRE is rewritten to PEXPIREAT for propagation, 1.8k instructions a job
local default_expiry = int_text(now + default_ttl + EXPIRY_GRACE)

local out = {}
local done_ids = {}
for i = 2, #ARGV, 3 do
  local id, token, result = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local job_key = base .. 'job:' .. id
  local f = redis.call('HMGET', job_key, unpack(FIELDS))
  if f[1] ~= 'active' or f[2] ~= token then
    out[#out + 1] = 0
  else
    unlease(id)
    local group, ckeys = f[4], keyed and f[9]
    if group or ckeys or queue_capped() then  -- else end_run has nothing to do
      end_run(job_key, marker, group or false, ckeys or false)
    end
    redis.call('HSET', job_key, 'state', 'completed', 'result', result, 'finished_at', now_text)
    done_ids[#done_ids + 1] = id  -- one `completed` entry after the loop
    if f[5] then notify_waiters(job_key, id, 'completed', result, f[5]) end
    outbox_sent = false
    if f[6] or f[7] then  -- a flow's node: settle towards its parent (§14.4)
      local on_fail = f[6] and redis.call('HGET', job_key, 'on_fail')
      flow_finished(id, 'completed', result, f[6], on_fail, f[7], field(f[3], 'result_ttl'), now,
                    maxlen)
    end
    local sent = outbox_sent
    if twins and release_blocked(job_key, id, now, ready, scheduled, marker, blocked_index) then
      -- the twin is the record now
    elseif f[3] then
      retain(job_key, id, completed, field(f[3], 'result_ttl'), now, f[8], keep)
    else  -- the default retention (retain, written out for the common case)
      keep(default_until, id)
      redis.call('PEXPIREAT', job_key, default_expiry)
      if f[8] then redis.call('PEXPIREAT', base .. 'log:' .. id, default_expiry) end
    end
    out[#out + 1] = sent and 2 or 1
  end
end
write_unleases()
write_kept()  -- before the sweep: a count-capped index counts them
if #done_ids > 0 then
  add_for_jobs(events, 'completed', done_ids)  -- the call's one `completed` entry (§11)
  trim(events, maxlen)
  count_outcomes(now, #done_ids, 0, 0, 0)
end
sweep(completed, now, 2 * #out)
return out

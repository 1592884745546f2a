-- Deduplication (docs/protocol.md §16.3), for enqueue. `dedup:<key>` (a
-- string) names the job that stands for a dedup key. An enqueue that
-- carries `dedup` (a key) and `dedup_mode`:
--   simple    stands aside (outcome `deduplicated`) while that job is
--             waiting, delayed, active or waiting for children;
--   throttle  stands aside while the key lives: it is set with PX
--             `dedup_ttl` ms by the job that created it, whatever became of it;
--   debounce  updates that job while it is waiting or delayed (outcome
--             `updated`): data replaced, run_at pushed to now + delay.
-- Otherwise the job is created and the key points at it. Keys without a
-- TTL (simple, debounce) are deleted with the record that holds them
-- (finish.lua's delete_job), so they last no longer than their job.
-- Needs `common`, `record`, `upsert` and `place`; the caller passes its
-- `replace` (enqueue.lua: an upsert of a waiting or delayed job; flow_add,
-- which never debounces, none).

local DEDUP_STANDS = {
  simple = {waiting = true, delayed = true, active = true, waiting_children = true},
  debounce = {waiting = true, delayed = true},
}

-- A missing or unknown mode is simple (§16.3).
local DEDUP_MODES = {simple = true, throttle = true, debounce = true}

-- Returns nil when the job is to be created; else the outcome, the
-- standing job's state ('' when its record is gone) and its id.
local function deduplicate(j, replace, events, maxlen)
  if not DEDUP_MODES[j.dedup_mode] then j.dedup_mode = 'simple' end
  local standing = redis.call('GET', base .. 'dedup:' .. j.dedup)
  if not standing then return nil end
  local job_key = base .. 'job:' .. standing
  local state = redis.call('HGET', job_key, 'state')
  if j.dedup_mode ~= 'throttle' then
    local stands = DEDUP_STANDS[j.dedup_mode]
    if not (state and stands and stands[state]) then return nil end
  end
  if j.dedup_mode == 'debounce' then
    j.id = standing
    state = replace(job_key, j, state)
    emit(events, maxlen, 'event', 'debounced', 'id', standing, 'dedup', j.dedup,
         'run_at', j.run_at)
    return 'updated', state, standing
  end
  emit(events, maxlen, 'event', 'deduplicated', 'id', standing, 'dedup', j.dedup,
       'mode', j.dedup_mode)
  return 'deduplicated', state or '', standing
end

-- The job `id` just created stands for its key from now on.
local function stand_for(j, id)
  if not DEDUP_MODES[j.dedup_mode] then j.dedup_mode = 'simple' end
  local key = base .. 'dedup:' .. j.dedup
  if j.dedup_mode == 'throttle' then
    redis.call('SET', key, id, 'PX', math.max(1, tonumber(j.dedup_ttl) or 1))
  else
    redis.call('SET', key, id)
  end
end
